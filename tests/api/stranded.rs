//! Stranded capacity: what a GPU's layout leaves that no profile or share can take, recorded with the
//! GPU's presence from the slices each batch says the GPU has.

use std::str::FromStr;

use axum::http::StatusCode;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::domain::access::Role;

use crate::billing::d;

use crate::support::*;

fn h100(uuid: &str, mig: bool) -> Value {
    json!({"uuid": uuid, "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
           "compute_slices": 7, "memory_slices": 8, "mig_enabled": mig})
}

fn mig(gpu: &str, n: usize, profile: &str, id: i64, c: i64, m: i64, bytes: i64) -> Value {
    json!({"uuid": format!("{gpu}::{n}"), "gpu_uuid": gpu, "kind": "mig", "profile": profile,
           "profile_id": id, "compute_slices": c, "memory_slices": m, "memory_bytes": bytes})
}

/// Per GPU, its stranded compute slices, memory slices, thread percent and memory bytes, each as
/// seconds' worth over the day.
async fn stranded(app: &TestApp) -> Vec<(String, i64, i64, i64, i64)> {
    sqlx::query_as(
        "select g.gpu_uuid, d.stranded_compute_slice_seconds::int8,
                d.stranded_memory_slice_seconds::int8, d.stranded_thread_percent_seconds::int8,
                (d.stranded_memory_byte_seconds / 3600)::int8
         from gpu_daily d join gpu g using (gpu_id) order by 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

const GIB: i64 = 1 << 30;

/// The layouts, one H100 each, present over `[start, end)` with `windows`: GPU-a two 3g.40gb,
/// GPU-b four 1g.20gb, GPU-c seven 1g.10gb, GPU-d `-cgi 9,19,19`, GPU-e an empty MIG card, GPU-f
/// two MPS clients of 50 % and 30 GiB.
fn layouts(start: &str, end: &str, windows: Vec<Value>) -> Value {
    let gib = GIB;
    let slices = [
        // Two 3g.40gb: one compute slice and no memory slice left.
        vec![
            mig("GPU-a", 0, "3g.40gb", 9, 3, 4, 42412802048),
            mig("GPU-a", 1, "3g.40gb", 9, 3, 4, 42412802048),
        ],
        // Four 1g.20gb: three compute slices with no memory.
        (0..4)
            .map(|n| mig("GPU-b", n, "1g.20gb", 15, 1, 2, 21_067_988_992))
            .collect(),
        // Seven 1g.10gb: the eighth memory slice has no compute.
        (0..7)
            .map(|n| mig("GPU-c", n, "1g.10gb", 19, 1, 1, 10468982784))
            .collect(),
        // `-cgi 9,19,19`: a 2g.20gb still fits beside it.
        vec![
            mig("GPU-d", 0, "3g.40gb", 9, 3, 4, 42412802048),
            mig("GPU-d", 1, "1g.10gb", 19, 1, 1, 10468982784),
            mig("GPU-d", 2, "1g.10gb", 19, 1, 1, 10468982784),
        ],
        // An empty MIG card.
        vec![],
        // MPS with every thread given out and 20 GiB not pinned: the memory is stranded.
        (0..2)
            .map(|n| {
                json!({"uuid": format!("GPU-f::{n}"), "gpu_uuid": "GPU-f", "kind": "mps",
                       "active_thread_percentage": 50, "pinned_memory_bytes": 30 * gib})
            })
            .collect(),
    ];
    let uuids = ["GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-e", "GPU-f"];
    json!({
        "node": "gpu-node-01",
        "period": {"start": start, "end": end},
        "gpus": uuids.iter().map(|u| h100(u, *u != "GPU-f")).collect::<Vec<_>>(),
        "slices": slices.iter().flatten().collect::<Vec<_>>(),
        "windows": windows
    })
}

#[tokio::test]
async fn each_layout_strands_what_no_profile_or_share_can_take_for_as_long_as_it_stands() {
    let app = TestApp::spawn().await;
    let batch = layouts("2026-10-01T00:00:00Z", "2026-10-01T01:00:00Z", vec![]);
    let r = app.ingest(&app.admin, &batch).await;
    assert_eq!(r.status, axum::http::StatusCode::OK, "{r:?}");
    let free_mps = 85_520_809_984 - 60 * GIB;
    assert_eq!(
        stranded(&app).await,
        [
            ("GPU-a".to_owned(), 3600, 0, 0, 0),
            ("GPU-b".to_owned(), 3 * 3600, 0, 0, 0),
            ("GPU-c".to_owned(), 0, 3600, 0, 0),
            ("GPU-d".to_owned(), 0, 0, 0, 0),
            ("GPU-e".to_owned(), 0, 0, 0, 0),
            ("GPU-f".to_owned(), 0, 0, 0, free_mps),
        ]
    );
}

/// The conservation block's unallocated, placeable and stranded figures of `period`.
async fn split(app: &TestApp, period: &str) -> (Value, [Decimal; 3]) {
    let r = app
        .get(Some(&app.admin), &format!("/v1/reports/monthly/{period}"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let c = &r.body["conservation"];
    let d = |f: &str| Decimal::from_str(c[f].as_str().unwrap()).unwrap();
    let figures = [d("unallocated"), d("placeable"), d("stranded")];
    (r.body.clone(), figures)
}

#[tokio::test]
async fn stranded_capacity_is_priced_apart_from_placeable_to_the_cent_and_frozen_with_the_books() {
    let app = TestApp::spawn().await;
    crate::billing::rate_card(&app, "2026-10-01T00:00:00Z", "4.00").await;
    app.put_team("nlp", &["nlp"]).await;
    // nlp holds GPU-a's two 3g.40gb for the hour; nobody holds anything else.
    let held = (0..2)
        .map(|n| {
            window(
                &format!("GPU-a::{n}"),
                "2026-10-01T00:00:00Z",
                "2026-10-01T01:00:00Z",
                "nlp",
                &format!("trainer-{n}"),
                3600.0,
            )
        })
        .collect();
    let batch = layouts("2026-10-01T00:00:00Z", "2026-10-01T01:00:00Z", held);
    let r = app.ingest(&app.admin, &batch).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");

    // Six H100s for an hour at 4.00: 24.00. nlp's two 3g.40gb: 2 x 4.00 x (0.5 x 3/7 + 0.5 x 4/8)
    // = 26/7 = 3.714286, billed 3.71; unallocated 24 - 26/7 = 20.285714, shown 20.29.
    // Stranded, at 4.00 x 0.5 = 2.00 an hour per whole GPU of compute or memory: GPU-a one compute
    // slice of 7 (2/7), GPU-b three (6/7), GPU-c one memory slice of 8 (1/4), GPU-f the 21,096,300,544
    // bytes of 85,520,809,984 no client can take (0.493361): 1.886218, shown 1.89; placeable the
    // rest of the unallocated 20.29: 18.40.
    let (report, figures) = split(&app, "2026-10").await;
    assert_eq!(figures, [d("20.29"), d("18.40"), d("1.89")]);
    let c = &report["conservation"];
    assert_eq!(c["fleet_cost"], "24.00");
    assert_eq!(c["team_charges"], "3.71");
    assert_eq!(c["rounding_residual"], "0.00");

    // Issued, the month answers from its books: a late hour of presence (GPU-b's layout again, three
    // more compute slices stranded) waits beside them and changes neither figure.
    crate::billing::run(&app, "2026-10").await;
    let issued = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/invoices/issue",
            &json!({"period": "2026-10"}),
        )
        .await;
    assert_eq!(issued.status, StatusCode::OK, "{issued:?}");
    let late = layouts("2026-10-02T00:00:00Z", "2026-10-02T01:00:00Z", vec![]);
    let r = app.ingest(&app.admin, &late).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let (after, figures) = split(&app, "2026-10").await;
    assert_eq!(after["state"], "issued");
    assert_eq!(figures, [d("20.29"), d("18.40"), d("1.89")]);
    assert_eq!(after["conservation"], report["conservation"]);
}

/// An app with the layouts present two hours, GPU-a's two 3g.40gb held by nlp's trainer-0 and
/// search's ranker-0 the first hour, nobody holding them the second; and a finance token.
async fn two_hours_of_gpu_a() -> (TestApp, String) {
    let app = TestApp::spawn().await;
    crate::billing::rate_card(&app, "2026-10-01T00:00:00Z", "4.00").await;
    app.put_team("nlp", &["nlp"]).await;
    app.put_team("search", &["search"]).await;
    // GPU-a's two 3g.40gb: nlp's trainer-0 and search's ranker-0, the first hour; the second hour
    // nobody holds them.
    let held = vec![
        window(
            "GPU-a::0",
            "2026-10-01T00:00:00Z",
            "2026-10-01T01:00:00Z",
            "nlp",
            "trainer-0",
            3600.0,
        ),
        window(
            "GPU-a::1",
            "2026-10-01T00:00:00Z",
            "2026-10-01T01:00:00Z",
            "search",
            "ranker-0",
            3600.0,
        ),
    ];
    let r = app
        .ingest(
            &app.admin,
            &layouts("2026-10-01T00:00:00Z", "2026-10-01T02:00:00Z", held),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let finance = app.token(Role::Finance, None, None).await;
    (app, finance)
}

const TWO_HOURS: &str =
    "/v1/gpus/GPU-a/ledger?from=2026-10-01T00:00:00Z&to=2026-10-01T02:00:00Z&step=hour";

#[tokio::test]
async fn a_cards_ledger_adds_up_to_its_cost_each_hour_in_json_and_csv() {
    let (app, finance) = two_hours_of_gpu_a().await;
    let uri = TWO_HOURS;
    let l = app.get(Some(&finance), uri).await;
    assert_eq!(l.status, StatusCode::OK, "{l:?}");
    assert_eq!(l.body["currency"], "USD");
    let steps = l.body["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    // Hour 1: 4.00 = 1.86 (nlp: 4.00 x 13/28 = 1.857143) + 1.86 (search) + 0.29 stranded (one
    // compute slice of seven at half weight: 2/7 = 0.285714) - 0.01 rounding.
    let h = &steps[0];
    assert_eq!(h["source"], "rollups");
    assert_eq!(
        [
            &h["cost"],
            &h["sharing_discount"],
            &h["placeable"],
            &h["stranded"],
            &h["rounding"]
        ],
        ["4.00", "0.00", "0.00", "0.29", "-0.01"]
    );
    let holders: Vec<(&str, &str, &str, &str)> = h["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["team"].as_str().unwrap(),
                x["workload"].as_str().unwrap(),
                x["slice_uuid"].as_str().unwrap(),
                x["charge"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        holders,
        [
            ("nlp", "trainer-0", "GPU-a::0", "1.86"),
            ("search", "ranker-0", "GPU-a::1", "1.86")
        ]
    );
    // Hour 2: the two 3g.40gb stand unheld (placeable: they can be given out as they are), and
    // the seventh compute slice is still stranded: 4.00 - 0.29 = 3.71 placeable.
    let h = &steps[1];
    assert_eq!(
        [&h["cost"], &h["placeable"], &h["stranded"], &h["rounding"]],
        ["4.00", "3.71", "0.29", "0.00"]
    );
    assert_eq!(h["holders"].as_array().unwrap().len(), 0);

    // The CSV: each hour's rows after its cost row add up to it.
    let csv = app.get(Some(&finance), &format!("{uri}&format=csv")).await;
    assert_eq!(csv.status, StatusCode::OK, "{csv:?}");
    let text = csv.body.as_str().unwrap().to_owned();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let hour_one: Vec<&csv::StringRecord> = rows
        .iter()
        .filter(|r| &r[0] == "2026-10-01T00:00:00+00:00")
        .collect();
    assert_eq!(&hour_one[0][6], "cost");
    assert_eq!(&hour_one[0][14], "4.00");
    let parts: Decimal = hour_one[1..]
        .iter()
        .map(|r| Decimal::from_str(&r[14]).unwrap())
        .sum();
    assert_eq!(parts, d("4.00"));
}

#[tokio::test]
async fn a_cards_ledger_refuses_what_it_cannot_answer_and_reads_an_issued_month_from_its_books() {
    let (app, finance) = two_hours_of_gpu_a().await;
    let uri = TWO_HOURS;
    // What it cannot answer, named.
    let unknown = app
        .get(
            Some(&finance),
            "/v1/gpus/GPU-nope/ledger?from=2026-10-01&to=2026-10-02",
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{unknown:?}");
    for (bad, field) in [
        ("from=2026-10-02&to=2026-10-01", "to"),
        ("from=2026-10-01&to=2027-01-03&step=hour", "to"),
        ("from=2026-10-01&to=2026-10-02&step=week", "step"),
        ("from=2026-10-01&to=2026-10-02&format=xlsx", "format"),
    ] {
        let r = app
            .get(Some(&finance), &format!("/v1/gpus/GPU-a/ledger?{bad}"))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {r:?}");
        assert_eq!(field_names(&r), [field], "{bad}: {r:?}");
    }
    // 93 days of hours are answered.
    let quarter = app
        .get(
            Some(&finance),
            "/v1/gpus/GPU-a/ledger?from=2026-10-01&to=2027-01-02&step=hour",
        )
        .await;
    assert_eq!(quarter.status, StatusCode::OK, "{quarter:?}");
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    for token in [&lead, &collector] {
        let r = app.get(Some(token), uri).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    }

    // Issued, October is read from its books, by day: its hours are refused, naming the step.
    crate::billing::run(&app, "2026-10").await;
    let issued = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/invoices/issue",
            &json!({"period": "2026-10"}),
        )
        .await;
    assert_eq!(issued.status, StatusCode::OK, "{issued:?}");
    let r = app.get(Some(&finance), uri).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(field_names(&r), ["step"]);
    let day = app
        .get(
            Some(&finance),
            "/v1/gpus/GPU-a/ledger?from=2026-10-01&to=2026-10-02&step=day",
        )
        .await;
    assert_eq!(day.status, StatusCode::OK, "{day:?}");
    let s = &day.body["steps"][0];
    assert_eq!(s["source"], "books");
    // The day: 8.00 = 1.86 + 1.86 (held the first hour) + 3.72 placeable + 0.57 stranded - 0.01
    // rounding: 26/7 = 3.714286 allocated, 8 - 26/7 = 4.285714 unallocated (4.29), stranded two
    // hours of 2/7 = 0.571429 (0.57), placeable 4.29 - 0.57; 1.86 + 1.86 + 4.29 = 8.01.
    assert_eq!(
        [&s["cost"], &s["placeable"], &s["stranded"], &s["rounding"]],
        ["8.00", "3.72", "0.57", "-0.01"]
    );
    assert!(s["holders"][0]["workload"].is_null());
}

/// Migration 0030 keeps presence per model, GPU geometry and day with the stranded seconds, and each
/// card's days as one row of arrays: the books of a month issued since 0028 (which kept a row per
/// card and day) are rewritten from those rows, and say what they said; books issued before 0028
/// (presence per model and day only) are left as they were; and issued books still refuse changes.
#[tokio::test]
async fn an_upgrade_keeps_what_issued_books_say_of_each_card_and_of_the_stranded_part() {
    let pool = empty_pool().await;
    apply_migrations(&pool, 1..=29).await;
    // Two H100s and an A100 of another geometry; October's books as the invoice run of 0028 wrote
    // them (two days), September's as one of an older version did (no card days).
    sqlx::raw_sql(
        "insert into gpu (gpu_uuid, node, model, memory_bytes, compute_slices, memory_slices, mig_enabled)
             values ('GPU-1', 'n1', 'NVIDIA H100 80GB HBM3', 85520809984, 7, 8, true),
                    ('GPU-2', 'n1', 'NVIDIA H100 80GB HBM3', 85520809984, 7, 8, true),
                    ('GPU-3', 'n2', 'NVIDIA A100-SXM4-80GB', 85899345920, 7, 8, false);
         insert into book (period) values ('2026-09-01'), ('2026-10-01');
         insert into book_model_day values
             ('2026-09-01', 'NVIDIA H100 80GB HBM3', null, '2026-09-30Z', 7200),
             ('2026-10-01', 'NVIDIA H100 80GB HBM3', null, '2026-10-01Z', 172800),
             ('2026-10-01', 'NVIDIA H100 80GB HBM3', null, '2026-10-02Z', 90000),
             ('2026-10-01', 'NVIDIA A100-SXM4-80GB', null, '2026-10-01Z', 86400);
         insert into book_gpu_day values
             ('2026-10-01', 1, 'GPU-1', 'NVIDIA H100 80GB HBM3', null, '2026-10-01Z', 85520809984, 7, 8, 86400, 86400, 0, 0, 0),
             ('2026-10-01', 1, 'GPU-1', 'NVIDIA H100 80GB HBM3', null, '2026-10-02Z', 85520809984, 7, 8, 3600, 3600, 0, 0, 0),
             ('2026-10-01', 2, 'GPU-2', 'NVIDIA H100 80GB HBM3', null, '2026-10-01Z', 85520809984, 7, 8, 86400, 0, 259200, 0, 0),
             ('2026-10-01', 2, 'GPU-2', 'NVIDIA H100 80GB HBM3', null, '2026-10-02Z', 85520809984, 7, 8, 86400, 0, 0, 0, 0),
             ('2026-10-01', 3, 'GPU-3', 'NVIDIA A100-SXM4-80GB', null, '2026-10-01Z', 85899345920, 7, 8, 86400, 0, 0, 4320000, 1000.5);
         update book set frozen_at = now();",
    )
    .execute(&pool)
    .await
    .unwrap();
    apply_migrations(&pool, 30..=i64::MAX).await;
    for (_, sql) in slicemeter::db::FUNCTIONS {
        sqlx::raw_sql(sql).execute(&pool).await.unwrap();
    }

    // October's presence, per model, geometry and day, with the stranded seconds of its cards.
    // Model, memory bytes, day, present, stranded compute and memory slices, MPS parts.
    type Row = (String, Option<i64>, String, String, String, String, String);
    let rows: Vec<Row> = sqlx::query_as(
        "select model, memory_bytes, to_char(day, 'MM-DD'), present_seconds::text,
                stranded_compute_slice_seconds::text, stranded_memory_slice_seconds::text,
                (stranded_thread_percent_seconds + stranded_memory_byte_seconds)::text
         from period_model_day('2026-10-01', true) order by model, day",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let s = |v: &str| v.to_owned();
    assert_eq!(
        rows,
        vec![
            (
                s("NVIDIA A100-SXM4-80GB"),
                Some(85899345920),
                s("10-01"),
                s("86400"),
                s("0"),
                s("0"),
                s("4321000.5")
            ),
            (
                s("NVIDIA H100 80GB HBM3"),
                Some(85520809984),
                s("10-01"),
                s("172800"),
                s("86400"),
                s("259200"),
                s("0")
            ),
            (
                s("NVIDIA H100 80GB HBM3"),
                Some(85520809984),
                s("10-02"),
                s("90000"),
                s("3600"),
                s("0"),
                s("0")
            ),
        ]
    );
    // Each card's days as they were kept.
    let days: Vec<(i32, String, String, String, String)> = sqlx::query_as(
        "select gpu_id, to_char(day, 'MM-DD'), present_seconds::text,
                stranded_compute_slice_seconds::text, stranded_memory_slice_seconds::text
         from period_gpu_day('2026-10-01', true) order by gpu_id, day",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        days,
        vec![
            (1, s("10-01"), s("86400"), s("86400"), s("0")),
            (1, s("10-02"), s("3600"), s("3600"), s("0")),
            (2, s("10-01"), s("86400"), s("0"), s("259200")),
            (2, s("10-02"), s("86400"), s("0"), s("0")),
            (3, s("10-01"), s("86400"), s("0"), s("0")),
        ]
    );
    let cards: i64 = sqlx::query_scalar("select count(*) from book_gpu")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(cards, 3, "a row per card");
    // September, issued before cards' days were kept: as it was, nothing stranded.
    let september: Vec<(Option<i64>, String, String)> = sqlx::query_as(
        "select memory_bytes, present_seconds::text, stranded_memory_slice_seconds::text
         from period_model_day('2026-09-01', true)",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(september, vec![(None, s("7200"), s("0"))]);
    // The books' rules hold for the rewritten rows and the new table.
    for sql in [
        "delete from book_model_day where period = '2026-10-01'",
        "delete from book_gpu where period = '2026-10-01'",
        "insert into book_gpu values ('2026-09-01', 1, null, '{}', '{}', '{}', '{}', '{}', '{}')",
    ] {
        let err = sqlx::raw_sql(sql).execute(&pool).await.unwrap_err();
        assert!(
            err.to_string().contains("are issued and cannot be changed"),
            "{sql}: {err}"
        );
    }
}
