//! Cost per unit of work: unit definitions (admin only, checked, audited) and the unit cost report,
//! read from Debian's real `prometheus` serving blocks written with `promtool`, against the books
//! of a hand-built fleet; the month so far on `/metrics` and the team page; definitions from TOML.
//! The file stays whole: its tests share the Prometheus, the counters' writer and the fleet.

use std::process::Command;
use std::time::Duration;

use axum::http::StatusCode;
use chrono::{DurationRound, Utc};
use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::{Value, json};
use slicemeter::domain::access::Role;
use slicemeter::domain::time::Month;
use slicemeter::http::state::ServerConfig;
use slicemeter::sim::prometheus::LocalPrometheus;
use slicemeter::units::service::UnitSource;

use crate::billing::{d, dec, rate_card};
use crate::fleet::{ui_page, ui_session};
use crate::support::*;

/// 2026-10-02T00:00:00Z in Unix seconds.
const T0: i64 = 1_790_899_200;

/// One series' samples as OpenMetrics lines.
fn series(out: &mut String, labels: &str, samples: impl IntoIterator<Item = (i64, u64)>) {
    for (t, v) in samples {
        out.push_str(&format!(
            "vllm:generation_tokens_total{{{labels}}} {v} {t}\n"
        ));
    }
}

/// The counters of the hand-built case, every 5 minutes:
/// - `chat-a-0` (nlp, model A): 62,500 tokens every 5 minutes from 00:00 to 04:00: 3,000,000.
/// - `chat-b-0` (cv, model B): 50,000 every 5 minutes to 01:30 (900,000); restarted at 01:35
///   (30,000), then 40,000 every 5 minutes to 03:00 (680,000): 1,610,000.
/// - `ghost-0` (cv, model A) and `stray-0` (elsewhere, model A): units no slice was held for.
pub(crate) fn counters() -> String {
    let mut text = String::new();
    series(
        &mut text,
        r#"model_name="A",namespace="nlp",pod="chat-a-0""#,
        (0..=48).map(|k| (T0 + k * 300, k as u64 * 62_500)),
    );
    series(
        &mut text,
        r#"model_name="B",namespace="cv",pod="chat-b-0""#,
        (0..=36).map(|k| {
            let v = if k <= 18 {
                k as u64 * 50_000
            } else {
                30_000 + (k as u64 - 19) * 40_000
            };
            (T0 + k * 300, v)
        }),
    );
    series(
        &mut text,
        r#"model_name="A",namespace="cv",pod="ghost-0""#,
        [(T0, 0), (T0 + 600, 1_000)],
    );
    series(
        &mut text,
        r#"model_name="A",namespace="elsewhere",pod="stray-0""#,
        [(T0, 100), (T0 + 600, 600)],
    );
    text.push_str("# EOF\n");
    text
}

/// Debian's `prometheus` serving `counters` (OpenMetrics), written into blocks with `promtool`.
pub(crate) async fn start_prometheus(dir: &std::path::Path, counters: &str) -> LocalPrometheus {
    start_labelled_prometheus(dir, counters, &[]).await
}

/// [`start_prometheus`] with `external_labels` in its configuration.
pub(crate) async fn start_labelled_prometheus(
    dir: &std::path::Path,
    counters: &str,
    external_labels: &'static [(&'static str, &'static str)],
) -> LocalPrometheus {
    let storage = dir.join("prometheus");
    std::fs::create_dir_all(&storage).unwrap();
    let file = dir.join("units.om");
    std::fs::write(&file, counters).unwrap();
    let promtool = slicemeter::sim::prometheus::binary("promtool").unwrap();
    let out = Command::new(promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&file)
        .arg(&storage)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tokio::task::spawn_blocking(move || {
        LocalPrometheus::start_labelled(&storage, &[], Duration::from_secs(60), external_labels)
    })
    .await
    .unwrap()
    .unwrap()
}

fn hours(slice: &str, from: u32, to: u32, ns: &str, pod: &str) -> Vec<Value> {
    (from..to)
        .map(|h| {
            window(
                slice,
                &format!("2026-10-02T{h:02}:00:00Z"),
                &format!("2026-10-02T{:02}:00:00Z", h + 1),
                ns,
                pod,
                3600.0,
            )
        })
        .collect()
}

/// nlp's 1g.10gb serves model A 00:00-04:00; cv's 3g.40gb serves model B 00:00-03:00, and cv's
/// other 1g.10gb is held 00:00-02:00 by a pod that counts nothing.
pub(crate) async fn fleet(app: &TestApp) {
    let r = rate_card(app, "2026-09-01T00:00:00Z", "4.00").await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    app.put_team("nlp", &["nlp"]).await;
    app.put_team("cv", &["cv"]).await;
    let mut windows = hours(MIG_1G_A, 0, 4, "nlp", "chat-a-0");
    windows.extend(hours(MIG_3G, 0, 3, "cv", "chat-b-0"));
    windows.extend(hours(MIG_1G_B, 0, 2, "cv", "idle-0"));
    let b = batch("2026-10-02T00:00:00Z", "2026-10-02T06:00:00Z", windows);
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

/// The units' Prometheus at `url`.
pub(crate) fn source(url: &str) -> UnitSource {
    UnitSource {
        url: url.to_owned(),
        auth: slicemeter::collector::import::prometheus::Auth::None,
        timeout: Duration::from_secs(20),
        max_answer_bytes: 1 << 30,
        remote_read: true,
    }
}

pub(crate) async fn define(app: &TestApp) {
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/unit-definitions/generated_tokens",
            &json!({"expression": "vllm:generation_tokens_total", "model_label": "model_name"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
}

fn half_even(v: Decimal) -> Decimal {
    v.round_dp_with_strategy(2, RoundingStrategy::MidpointNearestEven)
}

/// (key values, cost, units, unit cost) of each row.
fn rows(r: &Value) -> Vec<(Vec<String>, Decimal, Decimal, Decimal)> {
    r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["key"]
                    .as_object()
                    .unwrap()
                    .values()
                    .map(|v| v.as_str().unwrap_or("").to_owned())
                    .collect(),
                dec(&row["cost"]),
                dec(&row["units"]),
                dec(&row["unit_cost"]),
            )
        })
        .collect()
}

#[tokio::test]
async fn unit_cost_per_model_is_the_hand_calculation_a_reset_counted_once_and_nothing_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let prometheus = start_prometheus(dir.path(), &counters()).await;
    let app = TestApp::with_config(ServerConfig {
        ingest_rate: 0.0,
        units_prometheus: Some(source(&prometheus.url)),
        ..test_config()
    })
    .await;
    fleet(&app).await;
    define(&app).await;

    // By hand. An H100 at 4.00 an hour; a 1g.10gb is 0.5 x 1/7 + 0.5 x 1/8 = 15/112 of it, a
    // 3g.40gb 0.5 x 3/7 + 0.5 x 4/8 = 13/28. Each invoice line is rounded once: A's 4 hours of
    // 1g.10gb, B's 3 hours of 3g.40gb, the idle pod's 2 hours of 1g.10gb.
    let card = d("4.00");
    let a_cost = half_even(card * d("15") / d("112") * d("4"));
    let b_cost = half_even(card * d("13") / d("28") * d("3"));
    let idle_cost = half_even(card * d("15") / d("112") * d("2"));
    assert_eq!(
        (a_cost, b_cost, idle_cost),
        (d("2.14"), d("5.57"), d("1.07"))
    );
    // A: 48 x 62,500. B: 18 x 50,000, the restart's 30,000 once, then 17 x 40,000.
    let a_units = d("3000000");
    let b_units = d("900000") + d("30000") + d("680000");
    let million = d("1000000");
    let a_unit_cost = half_even(a_cost * million / a_units);
    let b_unit_cost = half_even(b_cost * million / b_units);
    assert_eq!((a_unit_cost, b_unit_cost), (d("0.71"), d("3.46")));

    let uri = "/v1/reports/unit-cost?from=2026-10-02T00:00:00Z&to=2026-10-02T06:00:00Z&unit=generated_tokens";
    let r = app
        .get(Some(&app.admin), &format!("{uri}&group_by=model"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["currency"], "USD");
    assert_eq!(r.body["per_units"], 1_000_000);
    assert_eq!(
        rows(&r.body),
        vec![
            (vec!["A".to_owned()], a_cost, a_units, a_unit_cost),
            (vec!["B".to_owned()], b_cost, b_units, b_unit_cost),
        ]
    );
    // The idle pod's hours: cost without units; the ghost's and the stray's: units without cost.
    assert_eq!(dec(&r.body["cost_without_units_total"]), idle_cost);
    let orphans: Vec<(String, String, Decimal)> = r.body["units_without_cost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["namespace"].as_str().unwrap().to_owned(),
                u["join"].as_str().unwrap().to_owned(),
                dec(&u["units"]),
            )
        })
        .collect();
    assert_eq!(
        orphans,
        vec![
            ("cv".into(), "ghost-0".into(), d("1000")),
            ("elsewhere".into(), "stray-0".into(), d("500")),
        ]
    );

    // Per team and model, as finance sees it; CSV alike.
    let finance = app.token(Role::Finance, None, None).await;
    let r = app
        .get(Some(&finance), &format!("{uri}&group_by=team,model"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        rows(&r.body),
        vec![
            (vec!["A".into(), "nlp".into()], a_cost, a_units, a_unit_cost),
            (vec!["B".into(), "cv".into()], b_cost, b_units, b_unit_cost),
        ]
    );
    let r = app
        .get(Some(&finance), &format!("{uri}&group_by=model&format=csv"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let csv = r.body.as_str().unwrap();
    assert!(
        csv.lines()
            .any(|l| l == "unit_cost,generated_tokens,,,,,A,USD,2.14,3000000,1000000,0.71,4"),
        "{csv}"
    );
    assert!(
        csv.lines()
            .any(|l| l.starts_with("cost_without_units,") && l.contains(",1.07,")),
        "{csv}"
    );

    // A team lead sees their own team only, and no other namespace's stray units.
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let r = app
        .get(Some(&lead), &format!("{uri}&group_by=team,model"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        rows(&r.body),
        vec![(vec!["A".into(), "nlp".into()], a_cost, a_units, a_unit_cost)]
    );
    assert_eq!(r.body["units_without_cost"], json!([]));
    assert_eq!(r.body["cost_without_units"], json!([]));

    // Collectors and importers get nothing; an unknown unit is a 404.
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    let importer = app.token(Role::Importer, None, None).await;
    for t in [&collector, &importer] {
        assert_eq!(app.get(Some(t), uri).await.status, StatusCode::FORBIDDEN);
    }
    let r = app
        .get(
            Some(&app.admin),
            "/v1/reports/unit-cost?from=2026-10-02&to=2026-10-03&unit=inferences",
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");
    let r = app
        .get(
            Some(&app.admin),
            "/v1/reports/unit-cost?from=2026-10-02T00:30:00Z&to=tomorrow&group_by=node",
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(field_names(&r), ["from", "to", "unit", "group_by"]);
    drop(prometheus);
}

#[tokio::test]
async fn definitions_are_admin_only_checked_field_by_field_and_audited() {
    let app = TestApp::spawn().await;
    let finance = app.token(Role::Finance, None, None).await;
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let body = json!({"expression": "vllm:generation_tokens_total", "model_label": "model_name"});
    for t in [&finance, &lead] {
        let r = app
            .send_json(
                "PUT",
                Some(t),
                "/v1/unit-definitions/generated_tokens",
                &body,
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
        assert_eq!(
            app.get(Some(t), "/v1/unit-definitions").await.status,
            StatusCode::FORBIDDEN
        );
    }

    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/unit-definitions/Tokens!",
            &json!({"expression": "max_over_time(rate(vllm:generation_tokens_total[5m])[32d:1h])",
                    "model_label": "model-name", "pod_label": "pod", "workload_label": "app",
                    "per_units": 0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(
        field_names(&r),
        [
            "name",
            "expression",
            "model_label",
            "workload_label",
            "per_units"
        ]
    );
    let said = fields(&r);
    assert!(said[1].1.contains("over 31 days"), "{said:?}");
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/unit-definitions/tokens",
            &json!({"expression": "x".repeat(2001)}),
        )
        .await;
    assert_eq!(field_names(&r), ["expression"]);
    assert_eq!(app.count("select count(*) from unit_definition").await, 0);

    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/unit-definitions/generated_tokens",
            &body,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(r.body["pod_label"], "pod");
    assert_eq!(r.body["namespace_label"], "namespace");
    assert_eq!(r.body["per_units"], 1_000_000);
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/unit-definitions/generated_tokens",
            &body,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let r = app.get(Some(&app.admin), "/v1/unit-definitions").await;
    assert_eq!(r.body.as_array().unwrap().len(), 1, "{r:?}");
    // Without a Prometheus, the report says so.
    let r = app
        .get(
            Some(&finance),
            "/v1/reports/unit-cost?from=2026-10-02&to=2026-10-03&unit=generated_tokens",
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    assert_eq!(r.body["error"]["code"], "units_not_configured");
    assert_eq!(
        r.body["error"]["message"],
        "no Prometheus is configured for units: start the server with --units-prometheus-url"
    );
    let r = app
        .send_json(
            "DELETE",
            Some(&app.admin),
            "/v1/unit-definitions/generated_tokens",
            &Value::Null,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{r:?}");
    let r = app
        .get(Some(&app.admin), "/v1/unit-definitions/generated_tokens")
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");
    let audit: Vec<(String, String, Option<i64>)> = sqlx::query_as(
        "select action, subject, actor_token_id from audit_log where action like 'unit.%' order by audit_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let actions: Vec<&str> = audit.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(actions, ["unit.put", "unit.put", "unit.delete"]);
    assert!(
        audit
            .iter()
            .all(|a| a.1 == "generated_tokens" && a.2.is_some())
    );
}

/// `/metrics` as served, polled until `done` holds (the unit costs are read behind the scrape),
/// for at most 60 s.
async fn metrics_until(app: &TestApp, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = app.get(None, "/metrics").await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        let page = r.body.as_str().unwrap().to_owned();
        if done(&page) {
            return page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/metrics never showed {what}:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of the sample line starting with `series` (name and labels), if served.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_month_so_far_is_a_gauge_per_unit_team_and_model_and_a_table_on_the_leads_team_page() {
    // The kept month so far ends at the last complete hour: the hour before this one holds the
    // case (in a month's first hour, that hour is the month before, which is then the one kept).
    let end = Utc::now()
        .duration_trunc(chrono::Duration::hours(1))
        .unwrap();
    let start = end - chrono::Duration::hours(1);
    let t0 = start.timestamp();
    // nlp's chat-a-0 serves Llama-3.1-8B: 50,000 tokens every 5 minutes; cv's chat-b-0 serves
    // Mistral-7B: 100,000 every 5 minutes.
    let mut text = String::new();
    series(
        &mut text,
        r#"model_name="Llama-3.1-8B",namespace="nlp",pod="chat-a-0""#,
        (0..=12).map(|k| (t0 + k * 300, k as u64 * 50_000)),
    );
    series(
        &mut text,
        r#"model_name="Mistral-7B",namespace="cv",pod="chat-b-0""#,
        (0..=12).map(|k| (t0 + k * 300, k as u64 * 100_000)),
    );
    text.push_str("# EOF\n");
    let dir = tempfile::tempdir().unwrap();
    let prometheus = start_prometheus(dir.path(), &text).await;
    let app = TestApp::with_config(ServerConfig {
        ingest_rate: 0.0,
        metrics_billing: true,
        units_prometheus: Some(source(&prometheus.url)),
        ..test_config()
    })
    .await;
    let r = rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    app.put_team("nlp", &["nlp"]).await;
    app.put_team("cv", &["cv"]).await;
    let (from, to) = (start.to_rfc3339(), end.to_rfc3339());
    let windows = vec![
        window(MIG_1G_A, &from, &to, "nlp", "chat-a-0", 3600.0),
        window(MIG_3G, &from, &to, "cv", "chat-b-0", 3600.0),
    ];
    let r = app.ingest(&app.admin, &batch(&from, &to, windows)).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    define(&app).await;

    // By hand: an hour of a 1g.10gb (15/112 of an H100 at 4.00) and of a 3g.40gb (13/28), each
    // line rounded once; 12 x 50,000 and 12 x 100,000 tokens.
    let a_cost = half_even(d("4.00") * d("15") / d("112"));
    let b_cost = half_even(d("4.00") * d("13") / d("28"));
    assert_eq!((a_cost, b_cost), (d("0.54"), d("1.86")));
    let a_unit_cost = half_even(a_cost * d("1000000") / d("600000"));
    let b_unit_cost = half_even(b_cost * d("1000000") / d("1200000"));
    assert_eq!((a_unit_cost, b_unit_cost), (d("0.90"), d("1.55")));

    let a = r#"slicemeter_unit_cost{unit="generated_tokens",team="nlp",model="Llama-3.1-8B",currency="USD"}"#;
    let b = r#"slicemeter_unit_cost{unit="generated_tokens",team="cv",model="Mistral-7B",currency="USD"}"#;
    let page = metrics_until(&app, "the unit cost gauge", |p| sample(p, a).is_some()).await;
    assert_eq!(sample(&page, a), Some(0.9), "{page}");
    assert_eq!(sample(&page, b), Some(1.55), "{page}");
    // The server's step keeps the settled hours, and says how far behind it is.
    slicemeter::units::counts::keep(&app.pool, &source(&prometheus.url), Utc::now())
        .await
        .unwrap();
    let page = metrics_until(&app, "the kept counts' lag", |p| {
        p.contains("slicemeter_unit_counts_lag_seconds{")
    })
    .await;
    // The documented unit rows, with their types and exactly their labels.
    let rows: Vec<_> = crate::metrics::documented()
        .into_iter()
        .filter(|d| d.process.contains("units"))
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in &rows {
        crate::metrics::check(&page, row).unwrap();
    }

    // nlp's lead sees nlp's unit cost, per workload and model, and not cv's.
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let cookie = ui_session(&app, &lead).await;
    let month = Month::of(start);
    let html = ui_page(&app, &cookie, &format!("/ui/team/nlp?month={month}")).await;
    assert!(html.contains(r#"data-table="unit-cost""#), "{html}");
    let table = html
        .split(r#"data-table="unit-cost""#)
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap();
    assert!(
        table.contains(r#"<td data-field="unit-cost">USD 0.90 per 1M generated tokens</td>"#),
        "{table}"
    );
    assert!(table.contains("<td>nlp / chat-a-0</td>"), "{table}");
    assert!(table.contains("<td>Llama-3.1-8B</td>"), "{table}");
    assert!(table.contains(">600,000<"), "{table}");
    assert!(table.contains(">USD 0.54<"), "{table}");
    assert!(!html.contains("Mistral-7B"), "{table}");
    // Another month has no kept unit cost: no table.
    let html = ui_page(&app, &cookie, "/ui/team/nlp?month=2026-09").await;
    assert!(!html.contains(r#"data-table="unit-cost""#), "{html}");
    drop(prometheus);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prometheus_that_is_down_leaves_the_gauge_and_the_table_out_and_counts_an_error() {
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = TestApp::with_config(ServerConfig {
        ingest_rate: 0.0,
        metrics_billing: true,
        units_prometheus: Some(source(&format!("http://127.0.0.1:{port}"))),
        ..test_config()
    })
    .await;
    let r = rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    app.put_team("nlp", &["nlp"]).await;
    let errors = |p: &str| sample(p, "slicemeter_unit_cost_errors_total").unwrap_or(0.0);
    let first = app.get(None, "/metrics").await;
    let before = errors(first.body.as_str().unwrap());
    define(&app).await;
    let started = std::time::Instant::now();
    let page = metrics_until(&app, "a failed read counted", |p| errors(p) >= before + 1.0).await;
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(!page.contains("slicemeter_unit_cost{"), "{page}");
    // The rest of /metrics is served as ever.
    assert!(page.contains("# TYPE slicemeter_team_month_to_date_gpu_equivalent_hours gauge"));
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let cookie = ui_session(&app, &lead).await;
    let month = Month::of(Utc::now());
    let html = ui_page(&app, &cookie, &format!("/ui/team/nlp?month={month}")).await;
    assert!(html.contains("Invoices"), "{html}");
    assert!(!html.contains(r#"data-table="unit-cost""#), "{html}");
}

#[tokio::test]
async fn the_example_file_defines_the_ready_made_units_read_back_through_the_api_and_audited() {
    let app = TestApp::spawn().await;
    let out = app.cli(&["unit", "apply", "deploy/units.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("unit generated_tokens defined from deploy/units.example.toml"),
        "{said}"
    );
    let r = app.get(Some(&app.admin), "/v1/unit-definitions").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let defs: Vec<(String, String, Value, i64)> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["name"].as_str().unwrap().to_owned(),
                u["expression"].as_str().unwrap().to_owned(),
                u["model_label"].clone(),
                u["per_units"].as_i64().unwrap(),
            )
        })
        .collect();
    let m = |s: &str| json!(s);
    assert_eq!(
        defs,
        vec![
            (
                "generated_tokens".into(),
                "vllm:generation_tokens_total".into(),
                m("model_name"),
                1_000_000
            ),
            (
                "prompt_tokens".into(),
                "vllm:prompt_tokens_total".into(),
                m("model_name"),
                1_000_000
            ),
            (
                "sglang_generated_tokens".into(),
                "sglang:generation_tokens_total".into(),
                m("model_name"),
                1_000_000
            ),
            (
                "sglang_prompt_tokens".into(),
                "sglang:prompt_tokens_total".into(),
                m("model_name"),
                1_000_000
            ),
            (
                "tgi_generated_tokens".into(),
                "tgi_request_generated_tokens_sum".into(),
                Value::Null,
                1_000_000
            ),
            (
                "triton_inferences".into(),
                "nv_inference_count".into(),
                m("model"),
                1_000
            ),
        ]
    );
    let r = app
        .get(Some(&app.admin), "/v1/unit-definitions/triton_inferences")
        .await;
    assert_eq!(r.body["pod_label"], "pod");
    assert_eq!(r.body["namespace_label"], "namespace");
    assert_eq!(
        r.body["description"],
        "NVIDIA Triton: inferences (per thousand)"
    );

    // A file with a bad unit stores nothing, naming each bad field; applying again redefines.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("units.toml");
    std::fs::write(
        &bad,
        "[generated_tokens]\nexpression = \"vllm:generation_tokens_total\"\nper_units = 1000\n\n\
         [Tokens]\nexpression = \"rate(x[40d])\"\n",
    )
    .unwrap();
    let out = app.cli(&["unit", "apply", bad.to_str().unwrap()]);
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[Tokens] name: "), "{err}");
    assert!(
        err.contains("[Tokens] expression: a range or subquery reaches over 31 days"),
        "{err}"
    );
    let r = app
        .get(Some(&app.admin), "/v1/unit-definitions/generated_tokens")
        .await;
    assert_eq!(r.body["per_units"], 1_000_000, "{r:?}");
    let out = app.cli(&["unit", "apply", "deploy/units.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("unit generated_tokens redefined from deploy/units.example.toml")
    );
    // Audited as the API's puts are, by the command line (no token).
    let audit: Vec<(String, Option<i64>)> = sqlx::query_as(
        "select action, actor_token_id from audit_log where action like 'unit.%' order by audit_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(audit.len(), 12, "{audit:?}");
    assert!(
        audit
            .iter()
            .all(|(action, token)| action == "unit.put" && token.is_none()),
        "{audit:?}"
    );
}
