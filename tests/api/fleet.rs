//! `GET /v1/fleet` and the operations endpoints.

use axum::http::StatusCode;
use slicemeter::domain::access::Role;
use tower::ServiceExt;

use crate::support::*;

#[tokio::test]
async fn the_fleet_lists_gpus_slices_and_who_held_them_in_the_last_hour() {
    let app = TestApp::spawn().await;
    let now = chrono::Utc::now();
    let start = slicemeter::domain::time::floor_to(
        now - chrono::Duration::minutes(3),
        chrono::Duration::minutes(1),
    );
    let end = start + chrono::Duration::minutes(1);
    let (s, e) = (start.to_rfc3339(), end.to_rfc3339());
    // The 1g.10gb is held through a DRA claim made from the pod's ResourceClaimTemplate.
    let mut claimed = window(MIG_1G_A, &s, &e, "nlp", "ranker-0", 60.0);
    claimed["consumer"]["dra_claim"] = serde_json::json!({"namespace": "nlp",
        "name": "ranker-0-gpu", "driver": "gpu.nvidia.com", "pool": "gpu-node-01",
        "device": "gpu-0-mig-1g10gb-7"});
    let b = batch(
        &s,
        &e,
        vec![window(MIG_3G, &s, &e, "nlp", "embedder-0", 60.0), claimed],
    );
    assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);
    let r = app.get(Some(&app.admin), "/v1/fleet").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let gpu = &r.body["gpus"][0];
    assert_eq!(gpu["model"], "NVIDIA H100 80GB HBM3");
    let slices = gpu["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 3);
    let held: Vec<_> = slices.iter().filter(|s| !s["holder"].is_null()).collect();
    assert_eq!(held.len(), 2);
    assert_eq!(held[0]["profile"], "3g.40gb");
    assert_eq!(held[0]["gpu_instance_id"], 2);
    assert_eq!(held[0]["holder"]["pod"], "embedder-0");
    assert_eq!(held[0]["holder"]["container"], "main");
    assert_eq!(held[0]["holder"]["team"], "unattributed");
    // In dcgm-exporter's vocabulary, so rows join with DCGM series of the same instance and pod.
    assert_eq!(
        held[0]["dcgm"],
        serde_json::json!({"UUID": H100, "Hostname": "gpu-node-01",
            "modelName": "NVIDIA H100 80GB HBM3", "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "2",
            "namespace": "nlp", "pod": "embedder-0", "container": "main"})
    );
    assert_eq!(
        held[1]["dcgm"],
        serde_json::json!({"UUID": H100, "Hostname": "gpu-node-01",
            "modelName": "NVIDIA H100 80GB HBM3", "GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "7",
            "namespace": "nlp", "pod": "ranker-0", "container": "main",
            "dra_claim_name": "ranker-0-gpu", "dra_claim_namespace": "nlp",
            "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": "gpu-node-01",
            "dra_device_name": "gpu-0-mig-1g10gb-7"})
    );
    // A free slice carries its device's labels only.
    let free = slices.iter().find(|s| s["holder"].is_null()).unwrap();
    assert_eq!(free["dcgm"]["GPU_I_ID"], "8");
    assert!(free["dcgm"].get("pod").is_none(), "{free}");
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    assert_eq!(
        app.get(Some(&lead), "/v1/fleet").await.status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn health_readiness_and_metrics_need_no_token() {
    let app = TestApp::spawn().await;
    assert_eq!(app.get(None, "/healthz").await.status, StatusCode::OK);
    let r = app.get(None, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, "ready\n");
    let (start, end, windows) = minute_windows(3);
    app.ingest(&app.admin, &batch(&start, &end, windows)).await;
    let r = app.get(None, "/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.body
            .as_str()
            .unwrap()
            .contains("slicemeter_ingest_windows_total{result=\"inserted\"}"),
        "{r:?}"
    );
    let r = app.get(None, "/v1/no-such-thing").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["error"]["code"], "not_found");
}

#[tokio::test]
async fn readiness_fails_with_503_and_retry_after_when_the_database_is_gone() {
    let app = TestApp::spawn().await;
    app.pool.close().await;
    let r = app.get(None, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{r:?}");
    assert_eq!(r.headers["retry-after"], "5");
    assert_eq!(app.get(None, "/healthz").await.status, StatusCode::OK);
}

/// Signs `token` in to the dashboard; the session cookie.
pub async fn ui_session(app: &TestApp, token: &str) -> String {
    let r = app
        .router
        .clone()
        .oneshot(
            axum::http::Request::post("/ui/signin")
                .header("content-type", "application/x-www-form-urlencoded")
                .body(axum::body::Body::from(format!("token={token}")))
                .unwrap(),
        )
        .await
        .unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

/// The page at `uri`, signed in with `cookie`; it must answer 200.
pub async fn ui_page(app: &TestApp, cookie: &str, uri: &str) -> String {
    let r = app
        .router
        .clone()
        .oneshot(
            axum::http::Request::get(uri)
                .header("cookie", cookie)
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{uri}");
    let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The map's bars (each has one grey background) and the drill-down links in it.
fn map_of(html: &str) -> (usize, Vec<String>) {
    let map = &html[html.find("data-chart=\"gpu-map\"").expect("a GPU map")..];
    let map = &map[..map.find("</svg>").unwrap()];
    let bars = map.matches("fill=\"#eee\" stroke=\"#bbb\"").count();
    let links = map
        .split("<a href=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].replace("&amp;", "&"))
        .collect();
    (bars, links)
}

#[tokio::test(flavor = "multi_thread")]
async fn past_its_limit_the_gpu_map_draws_a_bar_per_model_then_per_node_each_drilling_down() {
    use slicemeter::domain::time::floor_hour;
    let app = TestApp::with_config(slicemeter::http::state::ServerConfig {
        ingest_rate: 0.0,
        gpu_map_per_gpu: 4,
        ..test_config()
    })
    .await;
    let hour = floor_hour(chrono::Utc::now()) - chrono::Duration::hours(1);
    let month = slicemeter::domain::time::Month::of(hour);
    let card = crate::billing::rate_card(&app, &month.start().to_rfc3339(), "4.00").await;
    assert_eq!(card.status, StatusCode::CREATED, "{card:?}");
    let fleet = crate::reports::simulated(&app, 11, 16, &hour.to_rfc3339(), 1).await;
    let models: std::collections::BTreeSet<String> = fleet
        .nodes
        .iter()
        .flat_map(|n| n.gpus.iter().map(|g| g.report.model.clone()))
        .collect();
    assert!(models.len() > 1, "{models:?}");
    let cookie = ui_session(&app, &app.admin).await;

    // 16 GPUs, 4 at most one by one: a bar per model, each linking to its model.
    let html = ui_page(&app, &cookie, &format!("/ui/fleet?month={month}")).await;
    assert!(html.contains("data-map-rows=\"GPU model\""), "per model");
    let (bars, links) = map_of(&html);
    assert_eq!(bars, models.len());
    assert_eq!(links.len(), models.len(), "{links:?}");
    assert!(
        links.iter().all(|l| l.contains("model=NVIDIA+")),
        "{links:?}"
    );

    // A model with more GPUs than the limit: a bar per node; a node: its GPUs one by one.
    let (model, count) = models
        .iter()
        .map(|m| {
            let n = fleet
                .nodes
                .iter()
                .flat_map(|n| &n.gpus)
                .filter(|g| &g.report.model == m)
                .count();
            (m.clone(), n)
        })
        .max_by_key(|(_, n)| *n)
        .unwrap();
    assert!(count > 4, "{model}: {count} GPUs");
    let link = links
        .iter()
        .find(|l| l.contains(&format!("model={}", model.replace(' ', "+"))));
    let html = ui_page(&app, &cookie, link.unwrap()).await;
    assert!(html.contains("data-map-rows=\"node\""));
    let nodes: Vec<&slicemeter::sim::SimNode> = fleet
        .nodes
        .iter()
        .filter(|n| n.gpus.iter().any(|g| g.report.model == model))
        .collect();
    let (bars, links) = map_of(&html);
    assert_eq!(bars, nodes.len());
    let node = nodes[0];
    let link = links
        .iter()
        .find(|l| l.contains(&format!("node={}", node.name)))
        .expect("a link per node");
    let html = ui_page(&app, &cookie, link).await;
    assert!(html.contains("data-map-rows=\"GPU\""));
    let (bars, links) = map_of(&html);
    assert_eq!(bars, node.gpus.len());
    assert!(html.contains(&format!("{} · ", node.name)));
    // One by one, each GPU links to its ledger of the month: a CSV by day.
    let mut expected: Vec<String> = node
        .gpus
        .iter()
        .map(|g| format!("/ui/gpus/{}/ledger?month={month}", g.report.uuid))
        .collect();
    expected.sort();
    let mut got = links.clone();
    got.sort();
    assert_eq!(got, expected);
    let csv = ui_page(&app, &cookie, &links[0]).await;
    assert!(
        csv.starts_with("start,end,source,gpu_uuid,model,node,entry,"),
        "{csv}"
    );
    assert!(csv.contains(",cost,"), "{csv}");
}

/// The allocation chart's days ("YYYY-MM-DD allocated: N GPU-hours"), as the page prints them.
fn allocated_by_day(html: &str) -> std::collections::BTreeMap<String, String> {
    html.split("<title>")
        .skip(1)
        .filter_map(|t| {
            let t = &t[..t.find("</title>")?];
            let (day, rest) = t.split_once(" allocated: ")?;
            Some((day.to_owned(), rest.strip_suffix(" GPU-hours")?.to_owned()))
        })
        .collect()
}

/// The usage report's GPU-equivalent hours by day for `month`, whoever held them, to one decimal.
async fn usage_by_day(
    app: &TestApp,
    month: slicemeter::domain::time::Month,
) -> std::collections::BTreeMap<String, String> {
    let r = app
        .get(
            Some(&app.admin),
            &format!(
                "/v1/reports/usage?from={}&to={}&step=day",
                month.start().date_naive(),
                month.end().date_naive()
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let mut days: std::collections::BTreeMap<String, rust_decimal::Decimal> = Default::default();
    for row in r.body["rows"].as_array().unwrap() {
        let day = row["bucket"].as_str().unwrap()[..10].to_owned();
        let hours: rust_decimal::Decimal = row["gpu_equivalent_hours"]
            .as_str()
            .map(|s| s.parse().unwrap())
            .unwrap_or_else(|| row["gpu_equivalent_hours"].to_string().parse().unwrap());
        *days.entry(day).or_default() += hours;
    }
    // As the page prints hours: one decimal, half to even.
    days.into_iter()
        .map(|(d, h)| {
            let mut h =
                h.round_dp_with_strategy(1, rust_decimal::RoundingStrategy::MidpointNearestEven);
            h.rescale(1);
            (d, h.to_string())
        })
        .collect()
}

/// The fleet page's allocation chart says what the usage report says, day by day. After a write
/// it is served at once as it was (a read of the month takes tens of seconds at 10,000 GPUs) and
/// read anew behind the request, so the next pages show the write.
#[tokio::test(flavor = "multi_thread")]
async fn the_allocation_chart_is_the_usage_reports_and_catches_up_after_a_write_without_waiting() {
    // Two hours of one day, a few hours back.
    let mut hour =
        slicemeter::domain::time::floor_hour(chrono::Utc::now()) - chrono::Duration::hours(3);
    if (hour + chrono::Duration::hours(1)).date_naive() != hour.date_naive() {
        hour -= chrono::Duration::hours(1);
    }
    chart_catches_up(hour).await;
}

/// As above, the second hour the first of a new day: the kept chart is of one moment, so the new
/// day shows once the read behind the request brings its allocation, never before at none.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_on_a_new_day_joins_the_allocation_chart_with_its_allocation() {
    use chrono::Datelike;
    let mut midnight = slicemeter::domain::time::start_of(chrono::Utc::now().date_naive())
        - chrono::Duration::days(1);
    if midnight.day() == 1 {
        midnight -= chrono::Duration::days(1);
    }
    chart_catches_up(midnight - chrono::Duration::hours(1)).await;
}

/// An hour held at `hour`, the fleet page's allocation chart, two more slice-hours the hour after:
/// the next view is the chart as it was, and the views after it come to the usage report's.
async fn chart_catches_up(hour: chrono::DateTime<chrono::Utc>) {
    let app = TestApp::with_config(slicemeter::http::state::ServerConfig {
        ingest_rate: 0.0,
        ..test_config()
    })
    .await;
    let month = slicemeter::domain::time::Month::of(hour);
    assert_eq!(
        slicemeter::domain::time::Month::of(hour + chrono::Duration::hours(1)),
        month
    );
    let card = crate::billing::rate_card(&app, &month.start().to_rfc3339(), "4.00").await;
    assert_eq!(card.status, StatusCode::CREATED, "{card:?}");
    let held = |at: chrono::DateTime<chrono::Utc>, slices: &[&str]| {
        let (s, e) = (
            at.to_rfc3339(),
            (at + chrono::Duration::hours(1)).to_rfc3339(),
        );
        let windows = slices
            .iter()
            .map(|slice| window(slice, &s, &e, "nlp", "embedder-0", 3600.0))
            .collect();
        batch(&s, &e, windows)
    };
    let r = app.ingest(&app.admin, &held(hour, &[MIG_3G])).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let cookie = ui_session(&app, &app.admin).await;
    let uri = format!("/ui/fleet?month={month}");

    let before = allocated_by_day(&ui_page(&app, &cookie, &uri).await);
    let day = hour.date_naive().to_string();
    // A 3g.40gb for an hour at the rate card's weights (0.5 x 3/7 + 0.5 x 4/8).
    assert_eq!(
        before.get(&day).map(String::as_str),
        Some("0.5"),
        "{before:?}"
    );
    let api = usage_by_day(&app, month).await;
    assert_eq!(
        before.get(&day),
        api.get(&day),
        "page {before:?}, API {api:?}"
    );

    // Two more slice-hours: the next page is the kept chart, at once...
    let r = app
        .ingest(
            &app.admin,
            &held(hour + chrono::Duration::hours(1), &[MIG_3G, MIG_1G_A]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let after = usage_by_day(&app, month).await;
    assert_ne!(after, api, "the write adds GPU-hours");
    let kept = allocated_by_day(&ui_page(&app, &cookie, &uri).await);
    assert_eq!(kept, before, "served as kept");
    // ...and the read behind it brings the page to the usage report's figures.
    let mut now = kept;
    for _ in 0..200 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        now = allocated_by_day(&ui_page(&app, &cookie, &uri).await);
        if now != before {
            break;
        }
    }
    let days: Vec<&String> = after.keys().collect();
    assert_eq!(
        days.iter().map(|d| now.get(*d)).collect::<Vec<_>>(),
        days.iter().map(|d| after.get(*d)).collect::<Vec<_>>(),
        "page {now:?}, API {after:?}"
    );
}
