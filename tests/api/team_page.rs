//! The team page as a lead reads it: the month's cost and, beside it, what the team can save and
//! how, from right-sizing's one list; then the workloads, twenty at a time, sorted and paged by
//! the link, a bad link refused naming its parameter.

use axum::http::StatusCode;
use chrono::{DateTime, Duration, DurationRound, Utc};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::billing::dec;
use crate::fleet::{ui_page, ui_session};
use crate::support::*;

const GIB: i64 = 1 << 30;
/// A whole H100 of its own (not in MIG mode).
const WHOLE: &str = "GPU-00000000-0000-4000-8000-000000000400";

/// A window of `slice` held the whole hour from `start` by nlp's Deployment `app`.
fn hour(slice: &str, start: DateTime<Utc>, app: &str, peak: i64, busy: f64) -> Value {
    json!({"slice_uuid": slice, "start": start.to_rfc3339(),
           "end": (start + Duration::hours(1)).to_rfc3339(),
           "consumer": {"namespace": "nlp", "pod": format!("{app}-5d8c7b9f4-x7k2q"), "container": "main",
                        "labels": {"pod-template-hash": "5d8c7b9f4"}},
           "held_seconds": 3600.0, "memory_byte_seconds": 3600.0 * peak as f64 * 0.8,
           "memory_peak_bytes": peak, "compute_active_seconds": 3600.0 * busy})
}

/// nlp's last 14 days, at the demo rate card: the H100's 3g.40gb held by `embedder` at 6 GiB and
/// 3 % busy (a 1g.10gb would do), a 1g.10gb by `ranker` never busy (give it back), the other
/// 1g.10gb by `notebook` for the last 5 days only at 0.5 % busy, and a whole H100 by `lab` for the
/// last 5 days at 1.9 % busy and 10 GiB (the last two: too few days to judge).
async fn nlp_fortnight(app: &TestApp) {
    let out = app.cli(&["rate-card", "load", "deploy/rate-card.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    app.put_team("nlp", &["nlp"]).await;
    let end = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    for d in (1..=14).rev() {
        let day = end - Duration::days(d);
        let (mut mig, mut whole) = (Vec::new(), Vec::new());
        for h in 0..24 {
            let t = day + Duration::hours(h);
            mig.push(hour(MIG_3G, t, "embedder", 6 * GIB, 0.03));
            mig.push(hour(MIG_1G_A, t, "ranker", 2 * GIB, 0.0));
            if d <= 5 {
                mig.push(hour(MIG_1G_B, t, "notebook", 3 * GIB, 0.005));
                whole.push(hour(WHOLE, t, "lab", 10 * GIB, 0.019));
            }
        }
        let (from, to) = (day.to_rfc3339(), (day + Duration::days(1)).to_rfc3339());
        let r = app.ingest(&app.admin, &batch(&from, &to, mig)).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        if !whole.is_empty() {
            let b = json!({"node": "gpu-node-02", "period": {"start": from, "end": to},
                           "gpus": [{"uuid": WHOLE, "model": "NVIDIA H100 80GB HBM3",
                                     "memory_bytes": 85520809984_i64, "compute_slices": 7,
                                     "memory_slices": 8, "mig_enabled": false}],
                           "slices": [{"uuid": WHOLE, "gpu_uuid": WHOLE, "kind": "whole"}],
                           "windows": whole});
            let r = app.ingest(&app.admin, &b).await;
            assert_eq!(r.status, StatusCode::OK, "{r:?}");
        }
    }
}

/// The rows of the table `name`, each as its text with the tags taken out.
fn rows(html: &str, name: &str) -> Vec<String> {
    let Some(start) = html.find(&format!(r#"data-table="{name}""#)) else {
        return Vec::new();
    };
    let table = &html[start..start + html[start..].find("</table>").unwrap()];
    let body = &table[table.find("<tbody>").unwrap()..];
    body.split("<tr")
        .skip(1)
        .map(|row| {
            // Each piece starts inside its `<tr` tag.
            let mut text = String::new();
            let mut in_tag = true;
            for c in row.chars() {
                match c {
                    '<' => in_tag = true,
                    '>' => in_tag = false,
                    c if !in_tag => text.push(c),
                    _ => {}
                }
            }
            text.trim().to_owned()
        })
        .collect()
}

/// The text of the element carrying `data-field="field"`, tags taken out.
fn field(html: &str, field: &str) -> String {
    let at = html
        .find(&format!(r#"data-field="{field}""#))
        .unwrap_or_else(|| panic!("no {field} in {html}"));
    let open = at + html[at..].find('>').unwrap() + 1;
    // The element's text up to its first closing tag of a block (these are flat).
    let close = open + html[open..].find("</div>").unwrap_or(html[open..].len());
    let mut text = String::new();
    let mut in_tag = false;
    for c in html[open..close].chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text
}

#[tokio::test]
async fn a_lead_sees_the_cost_and_beside_it_what_to_save_first_from_one_list() {
    let app = TestApp::spawn().await;
    nlp_fortnight(&app).await;
    let lead = app
        .token(
            slicemeter::domain::access::Role::TeamLead,
            Some("nlp"),
            None,
        )
        .await;
    let cookie = ui_session(&app, &lead).await;
    let end = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    let month = (end - Duration::hours(1)).format("%Y-%m").to_string();
    let page = ui_page(&app, &cookie, &format!("/ui/team/nlp?month={month}")).await;

    // Lines of 730 hours at 4.00 an hour, weights 0.5/0.5 (DESIGN.md's worked example): the
    // 3g.40gb 1355.71, a 1g.10gb 391.07, a 1g.20gb 573.57, a whole H100 2920.00.
    // Judged: the embedder's 3g.40gb to a 1g.10gb saves 964.64, the ranker's 1g.10gb given back
    // 391.07; so far (5 days): the lab's whole H100 to a 1g.20gb 2346.43, the notebook's 391.07.
    assert_eq!(
        field(&page, "saving-total").trim(),
        "USD 1,355.71 a month",
        "{page}"
    );
    assert_eq!(
        field(&page, "saving-provisional").trim(),
        "and USD 2,737.50 more if 2 newer workloads stay as they are"
    );
    let top = field(&page, "top-saving");
    assert!(
        top.contains("Move to 1g.20gb if it stays so for lab, USD 2,346.43 a month"),
        "{top}"
    );
    // The cost and the saving lead the page: both before the cost over time and the workloads.
    let at = |needle: &str| {
        page.find(needle)
            .unwrap_or_else(|| panic!("no {needle} in {page}"))
    };
    assert!(at(r#"data-field="cost""#) < at(r#"data-field="saving-total""#));
    assert!(at(r#"data-table="right-sizing""#) < at(r#"data-chart="cost-over-time""#));
    assert!(at(r#"data-chart="cost-over-time""#) < at(r#"data-table="workloads""#));

    // One list, the largest saving first; a tie, the judged step first.
    let steps = rows(&page, "right-sizing");
    assert_eq!(steps.len(), 4, "{steps:?}");
    let expect = [
        ("lab", "Move to 1g.20gb if it stays so", "USD 2,346.43"),
        ("embedder", "Move to 1g.10gb", "USD 964.64"),
        ("ranker", "Give it back", "USD 391.07"),
        ("notebook", "Give it back if it stays so", "USD 391.07"),
    ];
    for (row, (workload, what, saving)) in steps.iter().zip(expect) {
        assert!(row.contains(&format!("nlp / {workload}")), "{row}");
        assert!(row.contains(what), "{workload}: {row}");
        assert!(row.contains(saving), "{workload}: {row}");
    }
    // Each with its evidence: the whole card at 1.9 % over 5 days gets advice.
    assert!(
        steps[0].contains("1.9 % busy (p95 1.9 %) over 5 days"),
        "{}",
        steps[0]
    );
    assert!(steps[0].contains("too few days to be sure"), "{}", steps[0]);
    assert!(
        steps[1].contains("3.0 % busy (p95 3.0 %) over 14 days"),
        "{}",
        steps[1]
    );
    assert!(
        steps[1].contains("memory p99 6.0 of 39.5 GiB; high confidence"),
        "{}",
        steps[1]
    );
    // Sharing the card under MPS, with its own saving: 1355.71 - 141.76.
    assert!(
        steps[1].contains("or share the card under MPS (2 % of the threads, 7.0 GiB pinned; less isolation): saves USD 1,213.95"),
        "{}",
        steps[1]
    );

    // Nothing says a workload holds what it needs; no second, different idle message.
    assert!(!page.contains("holds what it needs"), "{page}");
    assert!(!page.contains("idle-summary"));
    // The workload table says the same words for the same workloads.
    let table = rows(&page, "workloads");
    let row_of = |w: &str| {
        table
            .iter()
            .find(|r| r.contains(&format!("nlp / {w}")))
            .unwrap_or_else(|| panic!("no {w} in {table:?}"))
    };
    assert!(row_of("ranker").contains("Give it back: USD 391.07"));
    assert!(row_of("embedder").contains("Move to 1g.10gb: USD 964.64"));

    // The API says the same of the notebook: no recommendation yet, what its days so far advise.
    let r = app.get(Some(&lead), "/v1/recommendations").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let notebook = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["workload"] == "notebook")
        .unwrap();
    assert_eq!(notebook["action"], "wait");
    assert_eq!(notebook["monthly_delta"], Value::Null);
    assert_eq!(notebook["so_far"]["action"], "give_back");
    assert_eq!(
        dec(&notebook["so_far"]["monthly_delta"]),
        dec(&json!("391.07"))
    );
    assert_eq!(notebook["compute_busy"], 0.005);
}

/// 25 bare pods of nlp on the H100's 3g.40gb in September 2026, pod `i` held `i + 1` minutes.
async fn twenty_five_pods(app: &TestApp) {
    let out = app.cli(&["rate-card", "load", "deploy/rate-card.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    app.put_team("nlp", &["nlp"]).await;
    let t0: DateTime<Utc> = "2026-09-10T00:00:00Z".parse().unwrap();
    let windows: Vec<Value> = (0..25)
        .map(|i| {
            let start = t0 + Duration::minutes(30 * i);
            let held = 60 * (i + 1);
            window(
                MIG_3G,
                &start.to_rfc3339(),
                &(start + Duration::seconds(held)).to_rfc3339(),
                "nlp",
                &format!("pod-{i:02}"),
                held as f64,
            )
        })
        .collect();
    let b = batch(
        &t0.to_rfc3339(),
        &(t0 + Duration::hours(13)).to_rfc3339(),
        windows,
    );
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

/// The page at `uri` signed in with `cookie`: its status and body.
async fn get(app: &TestApp, cookie: &str, uri: &str) -> (StatusCode, String) {
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
    let status = r.status();
    let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn the_workloads_come_twenty_at_a_time_costliest_first_the_rest_a_click_away() {
    let app = TestApp::spawn().await;
    twenty_five_pods(&app).await;
    let cookie = ui_session(&app, &app.admin).await;
    let base = "/ui/team/nlp?month=2026-09";
    let first = ui_page(&app, &cookie, base).await;
    let pods = |html: &str| -> Vec<String> {
        rows(html, "workloads")
            .iter()
            .map(|r| {
                let at = r.find("pod-").unwrap_or_else(|| panic!("{r}"));
                r[at..at + 6].to_owned()
            })
            .collect()
    };
    // The costliest first: the pod held longest.
    let expected: Vec<String> = (0..25).rev().map(|i| format!("pod-{i:02}")).collect();
    assert_eq!(pods(&first), expected[..20], "{first}");
    assert!(field(&first, "pager").contains("Rows 1–20 of 25"));
    assert!(first.contains(&format!(
        r#"href="{}&amp;sort=cost&amp;dir=desc&amp;page=all""#,
        base
    )));
    assert!(first.contains("(all 25 rows)"), "the CSV has every row");
    let second = ui_page(&app, &cookie, &format!("{base}&page=2")).await;
    assert_eq!(pods(&second), expected[20..]);
    let all = ui_page(&app, &cookie, &format!("{base}&page=all")).await;
    assert_eq!(pods(&all), expected);
    // Sorted the other way on the server, a page at a time.
    let cheapest = ui_page(&app, &cookie, &format!("{base}&sort=cost&dir=asc")).await;
    let mut ascending = expected.clone();
    ascending.reverse();
    assert_eq!(pods(&cheapest), ascending[..20]);
    // The CSV: every row, whatever the page.
    let csv = ui_page(
        &app,
        &cookie,
        "/ui/team/nlp/workloads.csv?month=2026-09&sort=cost&dir=desc",
    )
    .await;
    assert_eq!(csv.lines().count(), 26, "{csv}");

    for (query, parameter) in [
        ("sort=price", "sort"),
        ("dir=up", "dir"),
        ("page=0", "page"),
        ("page=3", "page"),
        ("page=two", "page"),
        ("month=2026-13", "month"),
    ] {
        let uri = if parameter == "month" {
            format!("/ui/team/nlp?{query}")
        } else {
            format!("{base}&{query}")
        };
        let (status, body) = get(&app, &cookie, &uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(
            body.contains(&format!("{parameter}: ")),
            "{query} names {parameter}: {body}"
        );
    }
    let (status, body) = get(
        &app,
        &cookie,
        "/ui/team/nlp/workloads.csv?month=2026-09&sort=price",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("sort: must be one of"), "{body}");
}
