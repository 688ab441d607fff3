//! The consolidation planner over the API: today's layouts from ingest, the plan, its mig-parted
//! file.

use axum::http::StatusCode;
use chrono::{Duration, DurationRound, Utc};
use serde_json::{Value, json};
use yaml_rust2::{Yaml, YamlLoader};

use crate::billing::rate_card;
use crate::support::*;

const MODEL: &str = "NVIDIA H100 80GB HBM3";

fn gpu(n: u32) -> String {
    format!("GPU-00000000-0000-4000-8000-00000000{n:04}")
}

/// Four H100s on one node, each a quarter used: a 3g.40gb, a 2g.20gb and two 1g.10gb, each on a
/// card of its own, held for the last full hour.
pub async fn quarter_used_cards(app: &TestApp) {
    let end = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    let start = end - Duration::hours(1);
    // nlp owns namespace nlp from that hour on at least, besides any it has (a change dated
    // further back could reach months a caller has issued).
    let mut owned: Vec<String> =
        app.get(Some(&app.admin), "/v1/teams/nlp").await.body["namespaces"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
    if !owned.iter().any(|n| n == "nlp") {
        owned.push("nlp".into());
    }
    let owned: Vec<&str> = owned.iter().map(String::as_str).collect();
    app.put_team_from("nlp", &owned, &start.to_rfc3339()).await;
    let (s, e) = (start.to_rfc3339(), end.to_rfc3339());
    let cards = [
        ("3g.40gb", 9, 3, 4, 42_412_802_048_i64),
        ("2g.20gb", 14, 2, 2, 21_206_401_024),
        ("1g.10gb", 19, 1, 1, 10_468_982_784),
        ("1g.10gb", 19, 1, 1, 10_468_982_784),
    ];
    let mut gpus = Vec::new();
    let mut slices = Vec::new();
    let mut windows = Vec::new();
    for (n, (profile, id, c, m, bytes)) in cards.iter().enumerate() {
        let g = gpu(n as u32 + 1);
        let slice = format!("MIG-{}-{profile}", g.trim_start_matches("GPU-"));
        gpus.push(
            json!({"uuid": g, "model": MODEL, "memory_bytes": 85520809984_i64,
                         "compute_slices": 7, "memory_slices": 8, "mig_enabled": true}),
        );
        slices.push(
            json!({"uuid": slice, "gpu_uuid": g, "kind": "mig", "profile": profile,
                           "profile_id": id, "compute_slices": c, "memory_slices": m,
                           "memory_bytes": bytes}),
        );
        windows.push(window(&slice, &s, &e, "nlp", &format!("job-{n}"), 3600.0));
    }
    let b = json!({"node": "gpu-node-01", "period": {"start": s, "end": e},
                   "gpus": gpus, "slices": slices, "windows": windows});
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

#[tokio::test]
async fn four_quarter_used_cards_become_one_and_three_are_priced_as_freed() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-01-01T00:00:00Z", "4.00").await;
    quarter_used_cards(&app).await;
    let finance = app
        .token(slicemeter::domain::access::Role::Finance, None, None)
        .await;
    let r = app
        .get(Some(&finance), "/v1/plans/consolidation?days=14")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let m = &r.body["models"][0];
    assert_eq!(m["model"], MODEL);
    assert_eq!(m["cards_today"], 4);
    // 3g.40gb + 2g.20gb + 2 x 1g.10gb: 7 compute and 8 memory slices, one card.
    assert_eq!(m["cards_planned"], 1);
    assert_eq!(m["optimal"], true);
    assert_eq!(m["freed"].as_array().unwrap().len(), 3);
    // Three cards at 4.00 an hour for 730 hours.
    assert_eq!(m["monthly_saving"], "8760.00");
    assert_eq!(r.body["monthly_saving"], "8760.00");
    assert_eq!(r.body["currency"], "USD");
    // The card kept is the 3g.40gb's (the fullest), and three instances move onto it.
    let card = &m["cards"][0];
    assert_eq!(card["gpu_uuid"], gpu(1));
    let placed: Vec<(String, u64)> = card["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["profile"].as_str().unwrap().to_owned(),
                i["start"].as_u64().unwrap(),
            )
        })
        .collect();
    // The only valid placement: the 1g.10gb cannot use memory slice 7, so the 3g.40gb takes 4-7.
    assert_eq!(
        placed,
        vec![
            ("2g.20gb".to_owned(), 0),
            ("1g.10gb".to_owned(), 2),
            ("1g.10gb".to_owned(), 3),
            ("3g.40gb".to_owned(), 4),
        ]
    );
    assert_eq!(m["instances_moved"], 3);
    let moves = m["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 3);
    for (k, mv) in moves.iter().enumerate() {
        assert_eq!(mv["order"], k + 1);
        assert_eq!(mv["action"], "move");
        assert_eq!(mv["to_gpu"], gpu(1));
    }

    // The mig-parted file: YAML with the documented keys, one configuration for the card kept.
    let yaml = app
        .get(Some(&finance), "/v1/plans/consolidation/mig-parted.yaml")
        .await;
    assert_eq!(yaml.status, StatusCode::OK);
    assert!(
        yaml.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/yaml")
    );
    let text = yaml.body.as_str().unwrap();
    let doc = &YamlLoader::load_from_str(text).unwrap()[0];
    assert_eq!(doc["version"].as_str(), Some("v1"));
    let configs = doc["mig-configs"].as_hash().unwrap();
    assert_eq!(configs.len(), 1);
    let (name, entries) = configs.iter().next().unwrap();
    assert_eq!(name.as_str().unwrap(), format!("slicemeter-{}", gpu(1)));
    let entry = &entries[0];
    assert_eq!(entry["devices"].as_str(), Some("all"));
    assert_eq!(entry["mig-enabled"].as_bool(), Some(true));
    let devices = entry["mig-devices"].as_hash().unwrap();
    let count = |p: &str| devices[&Yaml::String(p.into())].as_i64();
    assert_eq!(count("3g.40gb"), Some(1));
    assert_eq!(count("2g.20gb"), Some(1));
    assert_eq!(count("1g.10gb"), Some(2));
    assert_eq!(devices.len(), 3);
}

#[tokio::test]
async fn a_plan_for_one_model_and_its_bad_parameters() {
    let app = TestApp::spawn().await;
    quarter_used_cards(&app).await;
    let r = app
        .get(
            Some(&app.admin),
            "/v1/plans/consolidation?model=NVIDIA%20B200",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["models"], json!([]));
    assert_eq!(r.body["monthly_saving"], "0");
    // No rate card: the cards are freed all the same, priced at nothing.
    let r = app
        .get(
            Some(&app.admin),
            &format!(
                "/v1/plans/consolidation?model={}",
                MODEL.replace(' ', "%20")
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["models"][0]["cards_planned"], 1);
    assert_eq!(r.body["models"][0]["hourly_cost"], Value::Null);
    assert_eq!(
        r.body["models"][0]["stranded_planned"]["monthly_cost"],
        Value::Null
    );
    assert_eq!(r.body["currency"], Value::Null);
    for (query, field) in [
        ("days=0", "days"),
        ("days=91", "days"),
        ("days=fourteen", "days"),
        ("model=", "model"),
        ("model=H100%00", "model"),
    ] {
        let r = app
            .get(
                Some(&app.admin),
                &format!("/v1/plans/consolidation?{query}"),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}: {r:?}");
        assert_eq!(r.body["error"]["fields"][0]["field"], field, "{query}");
    }
}

/// H100 profiles as the collector reports them: (name, profile id, compute, memory slices, bytes).
const PROFILES: &[(&str, u32, u8, u8, i64)] = &[
    ("1g.10gb", 19, 1, 1, 10_468_982_784),
    ("1g.20gb", 15, 1, 2, 21_206_401_024),
    ("3g.40gb", 9, 3, 4, 42_412_802_048),
    ("4g.40gb", 5, 4, 4, 42_412_802_048),
];

/// H100s on one node, card n+1 cut into `layouts[n]`, each instance held by a job of nlp's for the
/// last full hour.
async fn cards_cut(app: &TestApp, layouts: &[&[&str]]) {
    let end = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    let start = end - Duration::hours(1);
    app.put_team_from("nlp", &["nlp"], &start.to_rfc3339())
        .await;
    let (s, e) = (start.to_rfc3339(), end.to_rfc3339());
    let (mut gpus, mut slices, mut windows) = (Vec::new(), Vec::new(), Vec::new());
    for (n, layout) in layouts.iter().enumerate() {
        let g = gpu(n as u32 + 1);
        gpus.push(
            json!({"uuid": g, "model": MODEL, "memory_bytes": 85520809984_i64,
                   "compute_slices": 7, "memory_slices": 8, "mig_enabled": true}),
        );
        for (k, profile) in layout.iter().enumerate() {
            let &(_, id, c, m, bytes) = PROFILES.iter().find(|p| p.0 == *profile).unwrap();
            let slice = format!("MIG-{}-{k}", g.trim_start_matches("GPU-"));
            slices.push(
                json!({"uuid": slice, "gpu_uuid": g, "kind": "mig", "profile": profile,
                       "profile_id": id, "compute_slices": c, "memory_slices": m,
                       "memory_bytes": bytes}),
            );
            windows.push(window(
                &slice,
                &s,
                &e,
                "nlp",
                &format!("job-{n}-{k}"),
                3600.0,
            ));
        }
    }
    let b = json!({"node": "gpu-node-01", "period": {"start": s, "end": e},
                   "gpus": gpus, "slices": slices, "windows": windows});
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

/// A rate card of 4.00 an hour for an H100, compute weighed 0.6 and memory 0.4.
async fn rate_card_weighed(app: &TestApp) {
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/rate-cards",
            &json!({"effective_from": "2026-01-01T00:00:00Z", "currency": "USD",
                    "default_hourly_cost": "3.00", "weights": {"compute": "0.6", "memory": "0.4"},
                    "prices": {MODEL: "4.00"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
}

async fn plan_as_they_are(app: &TestApp) -> Value {
    let r = app
        .get(
            Some(&app.admin),
            "/v1/plans/consolidation?days=14&right_size=false",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    r.body
}

/// Each card's profiles in the plan, by card.
fn planned_profiles(m: &Value) -> Vec<(String, Vec<String>)> {
    m["cards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let mut p: Vec<String> = c["instances"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["profile"].as_str().unwrap().to_owned())
                .collect();
            p.sort();
            (c["gpu_uuid"].as_str().unwrap().to_owned(), p)
        })
        .collect()
}

#[tokio::test]
async fn the_plan_says_what_the_layouts_strand_today_and_after() {
    let app = TestApp::spawn().await;
    rate_card_weighed(&app).await;
    // Card 1: 3g.40gb at 0 and at 4 take all 8 memory slices and 6 of 7 compute: the seventh
    // compute slice has no memory, stranded. Cards 2 and 3: two 1g.20gb each (2 compute, 4
    // memory slices): a 4g.40gb still fits at 0 beside them (4 compute, 4 memory), leaving one
    // compute slice with no memory: 1 stranded each. Today: 3 compute slices, no memory slice.
    cards_cut(
        &app,
        &[
            &["3g.40gb", "3g.40gb"],
            &["1g.20gb", "1g.20gb"],
            &["1g.20gb", "1g.20gb"],
        ],
    )
    .await;
    let plan = plan_as_they_are(&app).await;
    let m = &plan["models"][0];
    // 0.6 x 3/7 = 0.257142857... of a card; x 4.00 x 730 h = 5256/7 = 750.857... USD a month.
    assert_eq!(
        m["stranded_today"],
        json!({"compute_slices": 3, "memory_slices": 0,
               "total_compute_slices": 21, "total_memory_slices": 24,
               "gpu_equivalents": "0.257143", "monthly_cost": "750.86"})
    );
    // The plan: 10 compute and 16 memory slices fit two cards (one freed: 4.00 x 730 = 2920.00),
    // every memory slice of both taken, so the 14 - 10 = 4 compute slices left are stranded
    // whichever two layouts hold them: 0.6 x 4/7 = 0.342857... of a card, 7008/7 = 1001.142...
    // USD a month. Freeing a card strands a slice more.
    assert_eq!(m["cards_planned"], 2);
    assert_eq!(m["monthly_saving"], "2920.00");
    assert_eq!(
        m["stranded_planned"],
        json!({"compute_slices": 4, "memory_slices": 0,
               "total_compute_slices": 14, "total_memory_slices": 16,
               "gpu_equivalents": "0.342857", "monthly_cost": "1001.14"})
    );

    // The plan page shows both.
    let cookie = crate::fleet::ui_session(&app, &app.admin).await;
    let page = crate::fleet::ui_page(&app, &cookie, "/ui/plan?right_size=false").await;
    assert!(
        page.contains(
            "today 3 compute slices, 0.26 GPU, USD 750.86 a month; planned <strong>4 compute slices, 0.34 GPU, USD 1,001.14 a month</strong>"
        ),
        "{page}"
    );
    // So does `slicemeter plan`'s summary.
    let out = app.cli(&["plan", "--no-right-size"]);
    assert!(out.status.success(), "{out:?}");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains(
            "  stranded (no profile fits): today 3 compute slices, 0.26 GPU, 750.86 USD a month; planned 4 compute slices, 0.34 GPU, 1001.14 USD a month\n"
        ),
        "{summary}"
    );
}

#[tokio::test]
async fn of_two_packings_on_as_many_cards_the_plan_takes_the_one_that_strands_less() {
    let app = TestApp::spawn().await;
    rate_card_weighed(&app).await;
    // Card 1: a 4g.40gb (memory slices 0-3) and three 1g.10gb (4-6): all 7 compute slices taken,
    // memory slice 7 left with none: 1 memory slice stranded. Card 2: four 1g.10gb, a 3g.40gb
    // still fits at 4: nothing stranded. Today: 0.4 x 1/8 = 0.05 of a card, x 4.00 x 730 h =
    // 146.00 USD a month.
    cards_cut(
        &app,
        &[
            &["4g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"],
            &["1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"],
        ],
    )
    .await;
    let plan = plan_as_they_are(&app).await;
    let m = &plan["models"][0];
    assert_eq!(
        m["stranded_today"],
        json!({"compute_slices": 0, "memory_slices": 1,
               "total_compute_slices": 14, "total_memory_slices": 16,
               "gpu_equivalents": "0.050000", "monthly_cost": "146.00"})
    );
    // 11 compute slices need two cards, as today: today's layouts are one packing on two. Moving
    // one 1g.10gb is another: card 1 then holds a 4g.40gb and two 1g.10gb (a 1g.20gb still fits
    // at 6), card 2 five 1g.10gb (a 1g.10gb and a 1g.20gb still fit): nothing stranded.
    assert_eq!(m["cards_planned"], 2);
    assert_eq!(
        planned_profiles(m),
        vec![
            (
                gpu(1),
                vec!["1g.10gb".into(), "1g.10gb".into(), "4g.40gb".into()]
            ),
            (gpu(2), vec!["1g.10gb".to_owned(); 5]),
        ]
    );
    assert_eq!(m["instances_moved"], 1);
    assert_eq!(
        m["stranded_planned"],
        json!({"compute_slices": 0, "memory_slices": 0,
               "total_compute_slices": 14, "total_memory_slices": 16,
               "gpu_equivalents": "0.000000", "monthly_cost": "0.00"})
    );
    // Deterministic: the same plan again.
    let again = plan_as_they_are(&app).await;
    assert_eq!(again["models"], plan["models"]);
}
