//! Prometheus metrics as docs/operations.md lists them: a served server and a running `slicemeter collect`
//! process scraped over loopback, and the Grafana dashboard checked against the same list.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use slicemeter::domain::access::Role;
use slicemeter::domain::time::Month;
use slicemeter::sim::SimFleet;

use crate::support::*;

/// One row of docs/operations.md's metrics table.
#[derive(Debug)]
pub struct Documented {
    pub name: String,
    kind: String,
    labels: BTreeSet<String>,
    /// `server`, `server (billing)`, `server (units)`, `server (billing, units)` or `collector`.
    pub process: String,
}

/// docs/operations.md's metrics table, between its `metrics: begin` and `metrics: end` markers.
pub fn documented() -> Vec<Documented> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .unwrap();
    let table = readme
        .split("<!-- metrics: begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- metrics: end -->").next())
        .expect("docs/operations.md's metrics table");
    let tick = |s: &str| s.trim().trim_matches('`').to_owned();
    let rows: Vec<Documented> = table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            Documented {
                name: tick(cells[1]),
                kind: tick(cells[2]),
                labels: cells[3]
                    .split(',')
                    .map(tick)
                    .filter(|s| !s.is_empty())
                    .collect(),
                process: cells[4].to_owned(),
            }
        })
        .collect();
    assert!(rows.len() >= 15, "{rows:?}");
    rows
}

/// The label names of an exposition-format sample line (`name{a="x",b="y"} 1`).
fn label_names(line: &str) -> BTreeSet<String> {
    let Some(open) = line.find('{') else {
        return BTreeSet::new();
    };
    let close = line.rfind('}').expect("a closed label set");
    line[open + 1..close]
        .split("\",")
        .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.trim().to_owned()))
        .collect()
}

/// Whether `page` has `d` with its type and a sample with exactly its labels.
pub fn check(page: &str, d: &Documented) -> Result<(), String> {
    if !page
        .lines()
        .any(|l| l == format!("# TYPE {} {}", d.name, d.kind))
    {
        return Err(format!("no `# TYPE {} {}`", d.name, d.kind));
    }
    // A histogram's samples are its buckets, sum and count; `le` is the bucket's own label.
    let sample = if d.kind == "histogram" {
        format!("{}_count", d.name)
    } else {
        d.name.clone()
    };
    let found: Vec<BTreeSet<String>> = page
        .lines()
        .filter(|l| {
            l.strip_prefix(&sample)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .map(label_names)
        .collect();
    if found.contains(&d.labels) {
        Ok(())
    } else {
        Err(format!(
            "{}: labels {:?} documented, {found:?} served",
            d.name, d.labels
        ))
    }
}

async fn scrape(url: &str) -> Option<String> {
    let r = reqwest::get(url).await.ok()?;
    assert_eq!(r.status(), 200, "{url}");
    r.text().await.ok()
}

/// Polls `url` until `done` holds for the page, for at most 60 s.
async fn scrape_until(url: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let page = scrape(url).await;
        if let Some(p) = &page
            && done(p)
        {
            return p.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{url} never showed {what}:\n{}",
            page.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_and_a_collector_serve_every_metric_the_readme_lists_with_its_labels() {
    let app = TestApp::spawn().await;
    for t in &SimFleet::generate(3, 12).teams {
        let ns: Vec<&str> = t.namespaces.iter().map(String::as_str).collect();
        app.put_team(&t.id, &ns).await;
    }
    let month = Month::of(chrono::Utc::now());
    let card = crate::billing::rate_card(&app, &month.start().to_rfc3339(), "4.00").await;
    assert_eq!(card.status, axum::http::StatusCode::CREATED, "{card:?}");
    let served = app
        .serve(slicemeter::http::state::ServerConfig {
            metrics_billing: true,
            ..test_config()
        })
        .await;
    let token = app.token(Role::Collector, None, Some("gpu-node-02")).await;
    let spool = tempfile::tempdir().unwrap();
    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let collector = Command::new(env!("CARGO_BIN_EXE_slicemeter"))
        .args(["collect", "--source", "sim", "--node", "gpu-node-02"])
        .args(["--seed", "3", "--gpus", "12"])
        .args(["--sample-interval", "100ms", "--window", "1s"])
        .args(["--metrics-listen", &metrics_addr])
        .arg("--spool-dir")
        .arg(spool.path())
        .args(["--server", &served.base])
        .env("SLICEMETER_TOKEN", &token)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(collector.id() as i32);

    let collector_page = scrape_until(
        &format!("http://{metrics_addr}/metrics"),
        "a batch shipped",
        |p| p.contains("# TYPE slicemeter_collector_last_ship_timestamp_seconds gauge"),
    )
    .await;
    // A batch the server refuses is counted by its reason (the recorder is the test process's,
    // shared with other tests: the count grows by at least this one).
    let refusals = |page: &str, reason: &str| -> f64 {
        let series = format!("slicemeter_ingest_refusals_total{{reason=\"{reason}\"}} ");
        page.lines()
            .find_map(|l| l.strip_prefix(&series)?.parse().ok())
            .unwrap_or(0.0)
    };
    let before = scrape(&format!("{}/metrics", served.base)).await.unwrap();
    let bad = app
        .send_json(
            "POST",
            Some(&token),
            "/v1/ingest",
            &serde_json::json!({"node": "gpu-node-02"}),
        )
        .await;
    assert!(bad.status.is_client_error(), "{bad:?}");
    let reason = bad.body["error"]["code"].as_str().unwrap().to_owned();
    // The billing gauges are read every 15 s at most: wait for a page that has the team's cost.
    let server_page = scrape_until(
        &format!("{}/metrics", served.base),
        "a team's month-to-date cost",
        |p| p.contains("slicemeter_team_month_to_date_cost{team="),
    )
    .await;

    let mut problems = Vec::new();
    // The unit costs need a units' Prometheus: tests/api/units.rs checks those rows.
    for d in documented()
        .into_iter()
        .filter(|d| !d.process.contains("units"))
    {
        let page = if d.process.starts_with("collector") {
            &collector_page
        } else {
            &server_page
        };
        if let Err(e) = check(page, &d) {
            problems.push(format!("{} ({}): {e}", d.name, d.process));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // The figures are the billing ones: a ratio between 0 and 1, a cost per team that pays.
    let value = |name: &str| -> f64 {
        server_page
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let allocation = value("slicemeter_fleet_month_to_date_allocation_ratio");
    assert!(allocation > 0.0 && allocation <= 1.0, "{allocation}");
    assert!(
        server_page.contains("slicemeter_node_ingest_lag_seconds{node=\"gpu-node-02\"}"),
        "{server_page}"
    );
    assert!(
        refusals(&server_page, &reason) >= refusals(&before, &reason) + 1.0,
        "the refused batch is counted as {reason}:\n{server_page}"
    );
    // Without --metrics-billing the same server shows no team's cost.
    let plain = app.serve(test_config()).await;
    let page = scrape(&format!("{}/metrics", plain.base)).await.unwrap();
    assert!(
        !page.contains("slicemeter_team_month_to_date_cost{"),
        "{page}"
    );
    assert!(page.contains("slicemeter_node_ingest_lag_seconds{node=\"gpu-node-02\"}"));
    plain.stop().await;

    kill(pid, Signal::SIGINT).unwrap();
    let mut collector = collector;
    let status = tokio::task::spawn_blocking(move || collector.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    served.stop().await;
}

/// Every `expr` in a Grafana dashboard's JSON, wherever it is nested.
fn expressions(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => expressions(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| expressions(v, out)),
        _ => {}
    }
}

#[test]
fn the_grafana_dashboard_charts_exactly_the_documented_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana/slicemeter.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    expressions(&dashboard, &mut exprs);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let documented: BTreeMap<String, String> =
        documented().into_iter().map(|d| (d.name, d.kind)).collect();
    let mut charted = BTreeSet::new();
    for e in &exprs {
        let names: Vec<&str> = e
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("slicemeter_"))
            .collect();
        assert!(!names.is_empty(), "{e:?} names no slicemeter metric");
        for n in names {
            // A histogram is queried through its buckets, sum or count.
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    n.strip_suffix(s)
                        .filter(|b| documented.get(*b).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(n);
            assert!(
                documented.contains_key(base),
                "{e:?} names {n}, which docs/operations.md does not list"
            );
            charted.insert(base.to_owned());
        }
    }
    let missing: Vec<&String> = documented
        .keys()
        .filter(|k| !charted.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but not charted: {missing:?}"
    );
}
