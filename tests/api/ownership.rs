//! Namespaces owned over time (issue 39): a namespace belongs to a team from an instant, its
//! unlabelled pods' usage goes to the owner at each moment (a window that straddles a change split
//! at the instant), and invoices, reports, exports, the OpenCost API and the pages follow it; a
//! change dated inside an issued month is refused and the issued books do not move.
//!
//! The file stays whole: one ownership timeline, followed through every reader of it.

use axum::http::StatusCode;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::domain::access::Role;

use crate::billing::{d, dec, draft_of, run};
use crate::fleet::{ui_page, ui_session};
use crate::support::*;

const A100: &str = "GPU-A100-0000-4000-8000-00000000a100";
const A100_B: &str = "GPU-A100-0000-4000-8000-00000000b100";
const A100_MODEL: &str = "NVIDIA A100-SXM4-80GB";

/// A batch from `gpu-node-07` over `[start, end)` of whole A100s.
fn a100_batch(start: &str, end: &str, gpus: &[&str], windows: Vec<Value>) -> Value {
    let inventory: Vec<Value> = gpus
        .iter()
        .map(|g| {
            json!({"uuid": g, "model": A100_MODEL, "memory_bytes": 85899345920_i64,
                   "compute_slices": 7, "memory_slices": 8, "mig_enabled": false})
        })
        .collect();
    let slices: Vec<Value> = gpus
        .iter()
        .map(|g| json!({"uuid": g, "gpu_uuid": g, "kind": "whole"}))
        .collect();
    json!({"node": "gpu-node-07", "period": {"start": start, "end": end},
           "gpus": inventory, "slices": slices, "windows": windows})
}

/// A whole A100 held throughout `[start, end)` by pod `pod` of namespace `ns`, no `team` label.
fn held(gpu: &str, start: &str, end: &str, ns: &str, pod: &str) -> Value {
    let s: chrono::DateTime<chrono::Utc> = start.parse().unwrap();
    let e: chrono::DateTime<chrono::Utc> = end.parse().unwrap();
    let seconds = (e - s).num_seconds() as f64;
    json!({"slice_uuid": gpu, "start": start, "end": end,
           "consumer": {"namespace": ns, "pod": pod, "container": "main"},
           "held_seconds": seconds, "memory_byte_seconds": seconds * 1.0e9,
           "memory_peak_bytes": 1_000_000_000_i64, "compute_active_seconds": seconds / 2.0})
}

/// A100s at 2.40 an hour, from August.
async fn a100_card(app: &TestApp) {
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/rate-cards",
            &json!({"effective_from": "2026-08-01T00:00:00Z", "currency": "USD",
                    "default_hourly_cost": "3.00", "prices": {A100_MODEL: "2.40"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
}

/// Days `first..=last` of September 2026, every hour of the A100 held by `ns`'s pod, in hour-long
/// windows, one batch a day.
async fn september_days(app: &TestApp, first: u32, last: u32, ns: &str) {
    for day in first..=last {
        let at = |h: u32| {
            if h == 24 {
                format!("2026-09-{:02}T00:00:00Z", day + 1)
            } else {
                format!("2026-09-{day:02}T{h:02}:00:00Z")
            }
        };
        let windows = (0..24)
            .map(|h| held(A100, &at(h), &at(h + 1), ns, "mover-0"))
            .collect();
        let r = app
            .ingest(&app.admin, &a100_batch(&at(0), &at(24), &[A100], windows))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
}

async fn put(app: &TestApp, token: &str, team: &str, body: Value) -> Reply {
    app.send_json("PUT", Some(token), &format!("/v1/teams/{team}"), &body)
        .await
}

fn message(r: &Reply) -> String {
    r.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn raw(app: &TestApp, uri: &str) -> String {
    let r = app.get(Some(&app.admin), uri).await;
    assert_eq!(r.status, StatusCode::OK, "{uri}: {r:?}");
    match r.body {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// A draft as a user reads it: team, total and its lines' hours and amounts.
type Draft = (String, String, Vec<(String, String)>);

/// Each draft as a user reads it.
fn drafts(run: &Reply) -> Vec<Draft> {
    run.body["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let lines = i["lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| (l["slice_hours"].to_string(), l["amount"].to_string()))
                .collect();
            (
                i["team"].as_str().unwrap().to_owned(),
                i["total"].to_string(),
                lines,
            )
        })
        .collect()
}

/// The issue's case: alpha owns `ns-move` from 1 to 10 September, beta from the 11th; the windows
/// of the 11th on arrive after the change.
async fn the_september_move(app: &TestApp) {
    a100_card(app).await;
    app.put_team("alpha", &["ns-move"]).await;
    app.put_team("beta", &[]).await;
    september_days(app, 1, 10, "ns-move").await;
    let from = "2026-09-11T00:00:00Z";
    let why = "ns-move handed to beta in the September reorganisation";
    let r = put(
        app,
        &app.admin,
        "alpha",
        json!({"namespaces": [], "effective_from": from, "reason": why}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["namespaces_removed"], json!(["ns-move"]));
    // Nothing of it was held from the 11th yet.
    assert_eq!(r.body["reattributed_consumers"], 0);
    let r = put(
        app,
        &app.admin,
        "beta",
        json!({"namespaces": ["ns-move"], "effective_from": from, "reason": why}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["namespaces_gained"], json!(["ns-move"]));
    assert_eq!(r.body["effective_from"], from);
    september_days(app, 11, 20, "ns-move").await;
}

#[tokio::test]
async fn a_namespace_handed_over_on_the_eleventh_bills_each_team_its_own_days() {
    let app = TestApp::spawn().await;
    the_september_move(&app).await;

    let first = run(&app, "2026-09").await;
    for team in ["alpha", "beta"] {
        let draft = draft_of(&first, team);
        assert_eq!(dec(&draft["total"]), d("576.00"), "{team}: 240 h x 2.40");
        assert_eq!(dec(&draft["lines"][0]["slice_hours"]), d("240"), "{team}");
    }
    // A re-run prices the same rollups the same way.
    let again = run(&app, "2026-09").await;
    assert_eq!(drafts(&first), drafts(&again));

    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(report.status, StatusCode::OK, "{report:?}");
    let costs: Vec<(String, Decimal)> = report.body["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["team"].as_str().unwrap().to_owned(), dec(&t["cost"])))
        .collect();
    assert_eq!(
        costs,
        vec![("alpha".into(), d("576.00")), ("beta".into(), d("576.00"))]
    );
    let usage = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2026-09-01&to=2026-10-01&group_by=team&step=day",
        )
        .await;
    assert_eq!(usage.status, StatusCode::OK, "{usage:?}");
    let days_of = |team: &str| {
        usage.body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["key"]["team"] == team)
            .map(|r| r["bucket"].as_str().unwrap()[8..10].to_owned())
            .collect::<Vec<_>>()
    };
    let alpha_days: Vec<String> = (1..=10).map(|d| format!("{d:02}")).collect();
    let beta_days: Vec<String> = (11..=20).map(|d| format!("{d:02}")).collect();
    assert_eq!(days_of("alpha"), alpha_days);
    assert_eq!(days_of("beta"), beta_days);

    // FOCUS: each team's rows are its own days and sum to its invoice.
    let focus = raw(&app, "/v1/exports/focus?period=2026-09").await;
    let mut csv = csv::Reader::from_reader(focus.as_bytes());
    let headers: Vec<String> = csv.headers().unwrap().iter().map(str::to_owned).collect();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let rows: Vec<Vec<String>> = csv
        .records()
        .map(|r| r.unwrap().iter().map(str::to_owned).collect())
        .collect();
    for team in ["alpha", "beta"] {
        let mine: Vec<&Vec<String>> = rows
            .iter()
            .filter(|r| r[col("SubAccountId")] == team)
            .collect();
        assert_eq!(mine.len(), 10, "{team}: a row a day");
        let billed: Decimal = mine.iter().map(|r| d(&r[col("BilledCost")])).sum();
        assert_eq!(billed, d("576.00"), "{team}");
    }

    // The OpenCost API, by team.
    let oc = app
        .get(
            Some(&app.admin),
            "/allocation?window=2026-09-01T00:00:00Z,2026-10-01T00:00:00Z&aggregate=team",
        )
        .await;
    assert_eq!(oc.status, StatusCode::OK, "{oc:?}");
    let set = &oc.body["data"][0];
    for team in ["alpha", "beta"] {
        let cost = Decimal::from_str_exact(&set[team]["gpuCost"].to_string()).unwrap();
        assert_eq!(cost.round_dp(2), d("576.00"), "{team}");
    }

    // The pages say when it changed hands.
    let cookie = ui_session(&app, &app.admin).await;
    let fleet = ui_page(&app, &cookie, "/ui/fleet?month=2026-09").await;
    assert!(
        fleet.contains("ns-move</strong>: alpha until 2026-09-11 00:00:00 UTC, then beta"),
        "{fleet}"
    );
    let alpha = ui_page(&app, &cookie, "/ui/team/alpha?month=2026-09").await;
    assert!(
        alpha.contains("ns-move</strong> is no longer alpha's from 2026-09-11 00:00:00 UTC"),
        "{alpha}"
    );
    let beta = ui_page(&app, &cookie, "/ui/team/beta?month=2026-09").await;
    assert!(
        beta.contains("ns-move</strong> is beta's from 2026-09-11 00:00:00 UTC"),
        "{beta}"
    );
    let october = ui_page(&app, &cookie, "/ui/team/beta?month=2026-10").await;
    assert!(
        !october.contains("changed hands"),
        "nothing changed hands in October"
    );
}

#[tokio::test]
async fn a_team_shows_each_namespaces_owners_over_time_and_a_lead_only_their_own_spans() {
    let app = TestApp::spawn().await;
    the_september_move(&app).await;
    let r = app.get(Some(&app.admin), "/v1/teams/beta").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["namespaces"], json!(["ns-move"]));
    let owners = &r.body["ownership"][0];
    assert_eq!(owners["namespace"], "ns-move");
    let spans: Vec<(Value, Value, Value)> = owners["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["team"].clone(),
                o["effective_from"].clone(),
                o["effective_until"].clone(),
            )
        })
        .collect();
    assert_eq!(
        spans,
        vec![
            (
                json!("alpha"),
                json!("2000-01-01T00:00:00Z"),
                json!("2026-09-11T00:00:00Z")
            ),
            (json!("beta"), json!("2026-09-11T00:00:00Z"), Value::Null),
        ]
    );
    assert_eq!(
        owners["owners"][1]["reason"],
        "ns-move handed to beta in the September reorganisation"
    );
    // Who and why, in the audit log.
    let (role, details): (String, Value) = sqlx::query_as(
        "select actor_role, details from audit_log
         where action = 'team.put' and subject = 'beta' order by audit_id desc limit 1",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(role, "admin");
    assert_eq!(details["effective_from"], "2026-09-11T00:00:00Z");
    assert_eq!(
        details["reason"],
        "ns-move handed to beta in the September reorganisation"
    );
    assert_eq!(details["namespaces_gained"], json!(["ns-move"]));

    let lead = app.token(Role::TeamLead, Some("alpha"), None).await;
    let r = app.get(Some(&lead), "/v1/teams/alpha").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["namespaces"], json!([]));
    assert_eq!(
        r.body["ownership"],
        json!([{"namespace": "ns-move", "owners": [{
            "team": "alpha", "effective_from": "2000-01-01T00:00:00Z",
            "effective_until": "2026-09-11T00:00:00Z",
            "reason": "the test's teams",
            "recorded_at": r.body["ownership"][0]["owners"][0]["recorded_at"]}]}])
    );
    assert!(!r.body.to_string().contains("beta"), "{r:?}");
    let r = app.get(Some(&lead), "/v1/teams/beta").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    assert_eq!(
        app.get(Some(&app.admin), "/v1/teams/nobody").await.status,
        StatusCode::NOT_FOUND
    );
    // A lead cannot change who owns what, dated or not.
    let r = put(
        &app,
        &lead,
        "alpha",
        json!({"namespaces": ["ns-move"], "effective_from": "2026-09-15T00:00:00Z",
               "reason": "mine"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    let r = app.get(Some(&app.admin), "/v1/teams/beta").await;
    assert_eq!(
        r.body["ownership"][0]["owners"].as_array().unwrap().len(),
        2
    );
}

#[tokio::test]
async fn a_move_at_half_past_ten_splits_that_hours_window_thirty_thirty_to_the_cent() {
    let app = TestApp::spawn().await;
    a100_card(&app).await;
    for team in ["alpha", "beta", "gamma", "delta"] {
        app.put_team(team, &[]).await;
    }
    app.put_team("alpha", &["ns-split"]).await;
    app.put_team("gamma", &["ns-ahead"]).await;
    let at = "2026-09-02T10:30:00Z";
    let why = "handed over mid-morning";
    // gamma's namespace is moved before its window arrives: ingest splits the window.
    for (team, list) in [("gamma", json!([])), ("delta", json!(["ns-ahead"]))] {
        let r = put(
            &app,
            &app.admin,
            team,
            json!({"namespaces": list, "effective_from": at, "reason": why}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    let r = app
        .ingest(
            &app.admin,
            &a100_batch(
                "2026-09-02T10:00:00Z",
                "2026-09-02T11:00:00Z",
                &[A100, A100_B],
                vec![
                    held(
                        A100,
                        "2026-09-02T10:00:00Z",
                        "2026-09-02T11:00:00Z",
                        "ns-split",
                        "p",
                    ),
                    held(
                        A100_B,
                        "2026-09-02T10:00:00Z",
                        "2026-09-02T11:00:00Z",
                        "ns-ahead",
                        "q",
                    ),
                ],
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    // alpha's namespace is moved after: the stored hour is split again from its raw window.
    for (team, list) in [("alpha", json!([])), ("beta", json!(["ns-split"]))] {
        let r = put(
            &app,
            &app.admin,
            team,
            json!({"namespaces": list, "effective_from": at, "reason": why}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        assert_eq!(r.body["reattributed_consumers"], 1, "{r:?}");
    }
    let halves: Vec<(String, Decimal, i32)> = sqlx::query_as(
        "select team_id, held_seconds, window_count from usage_hourly order by team_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        halves,
        vec![
            ("alpha".into(), d("1800"), 1),
            ("beta".into(), d("1800"), 0),
            ("delta".into(), d("1800"), 0),
            ("gamma".into(), d("1800"), 1),
        ]
    );
    let drafts = run(&app, "2026-09").await;
    for team in ["alpha", "beta", "gamma", "delta"] {
        assert_eq!(
            dec(&draft_of(&drafts, team)["total"]),
            d("1.20"),
            "{team}: half an hour of 2.40"
        );
    }
}

#[tokio::test]
async fn a_namespace_added_without_an_instant_changes_nothing_before_the_request() {
    let app = TestApp::spawn().await;
    a100_card(&app).await;
    september_days(&app, 3, 3, "ns-late").await;
    let r = put(
        &app,
        &app.admin,
        "gamma",
        json!({"namespaces": ["ns-late"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["reattributed_consumers"], 0);
    let from: chrono::DateTime<chrono::Utc> =
        r.body["effective_from"].as_str().unwrap().parse().unwrap();
    assert!(
        (chrono::Utc::now() - from).num_seconds().abs() < 60,
        "{from}"
    );
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(report.body["teams"], json!([]), "{report:?}");
    assert_eq!(
        report.body["unattributed"]["consumers"][0]["pod"],
        "mover-0"
    );
    assert_eq!(
        dec(&report.body["conservation"]["unattributed"]),
        d("57.60"),
        "24 h x 2.40 stay on the platform"
    );
    let drafts = run(&app, "2026-09").await;
    assert!(
        drafts.body["drafts"].as_array().unwrap().is_empty(),
        "{drafts:?}"
    );
}

/// September's books as finance reads them: its FOCUS and ERP exports, and its monthly report's
/// teams and conservation (late data shows beside them, as pending corrections).
async fn issued_books(app: &TestApp) -> (String, String, String) {
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    (
        raw(app, "/v1/exports/focus?period=2026-09").await,
        raw(app, "/v1/exports/erp?period=2026-09").await,
        format!("{} {}", report.body["teams"], report.body["conservation"]),
    )
}

#[tokio::test]
async fn a_move_that_reaches_an_issued_month_is_refused_and_its_books_stay_byte_identical() {
    let app = TestApp::spawn().await;
    the_september_move(&app).await;
    run(&app, "2026-09").await;
    let issued = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/invoices/issue",
            &json!({"period": "2026-09"}),
        )
        .await;
    assert_eq!(issued.status, StatusCode::OK, "{issued:?}");
    let before = issued_books(&app).await;
    let erp = &before.1;
    for cc in ["CC-alpha", "CC-beta"] {
        assert!(
            erp.lines().any(|l| l.contains(cc) && l.contains("576.00")),
            "{cc}: {erp}"
        );
    }
    // Dated inside September (beta gives it up from the 15th), or in August but reaching
    // September (alpha's days until the 11th): both refused, naming it.
    for (team, from) in [
        ("beta", "2026-09-15T00:00:00Z"),
        ("alpha", "2026-08-20T00:00:00Z"),
    ] {
        let r = put(
            &app,
            &app.admin,
            team,
            json!({"namespaces": [], "effective_from": from, "reason": "undo"}),
        )
        .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{from}: {r:?}");
        assert_eq!(r.body["error"]["code"], "ownership_conflict");
        assert!(
            message(&r).contains("2026-09, a period with issued invoices"),
            "{r:?}"
        );
    }
    let r = app.get(Some(&app.admin), "/v1/teams/beta").await;
    assert_eq!(r.body["namespaces"], json!(["ns-move"]), "nothing stored");
    assert_eq!(
        r.body["ownership"][0]["owners"].as_array().unwrap().len(),
        2
    );
    // From October on, it can change: September keeps its books.
    let r = put(
        &app,
        &app.admin,
        "beta",
        json!({"namespaces": [], "effective_from": "2026-10-01T00:00:00Z", "reason": "closed"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    // Beta's late day of September is a correction, priced beside the books, never in them.
    september_days(&app, 21, 21, "ns-move").await;
    let after = issued_books(&app).await;
    assert!(before == after, "September's books moved");
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(report.body["pending_corrections"][0]["team"], "beta");
    assert_eq!(
        dec(&report.body["pending_corrections"][0]["amount"]),
        d("57.60")
    );
}

#[tokio::test]
async fn a_change_in_an_hour_whose_raw_windows_are_gone_is_refused_but_one_on_the_hour_is_not() {
    let app = TestApp::spawn().await;
    a100_card(&app).await;
    app.put_team("alpha", &["ns-old"]).await;
    app.put_team("beta", &[]).await;
    september_days(&app, 4, 4, "ns-old").await;
    sqlx::query("delete from occupancy")
        .execute(&app.pool)
        .await
        .unwrap();
    let r = put(
        &app,
        &app.admin,
        "alpha",
        json!({"namespaces": [], "effective_from": "2026-09-04T12:15:00Z", "reason": "r"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    assert!(message(&r).contains("no longer kept"), "{r:?}");
    let r = put(
        &app,
        &app.admin,
        "alpha",
        json!({"namespaces": [], "effective_from": "2026-09-04T12:00:00Z", "reason": "r"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        app.count("select count(*) from usage_hourly where team_id = 'unattributed'")
            .await,
        12
    );
}

#[tokio::test]
async fn dating_a_change_names_each_bad_field() {
    let app = TestApp::spawn().await;
    let cases = [
        (
            json!({"namespaces": ["a"], "effective_from": "2026-09-01T00:00:00Z"}),
            "reason",
        ),
        (
            json!({"effective_from": "2026-09-01T00:00:00Z", "reason": "r"}),
            "effective_from",
        ),
        (
            json!({"namespaces": ["a"], "effective_from": "1999-12-31T00:00:00Z", "reason": "r"}),
            "effective_from",
        ),
        (
            json!({"namespaces": ["a"], "effective_from": "2099-01-01T00:00:00Z"}),
            "effective_from",
        ),
        (
            json!({"namespaces": ["a"], "effective_from": "2026-09-01T00:00:00.0000001Z",
                   "reason": "r"}),
            "effective_from",
        ),
        (json!({"namespaces": ["a"], "reason": ""}), "reason"),
    ];
    for (body, field) in cases {
        let r = put(&app, &app.admin, "alpha", body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {r:?}");
        assert_eq!(field_names(&r), vec![field], "{body}: {r:?}");
    }
    assert!(
        app.get(Some(&app.admin), "/v1/teams")
            .await
            .body
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["team"] != "alpha"),
        "nothing stored"
    );
}

#[tokio::test]
async fn an_upgrade_keeps_todays_bills_with_each_mapping_owned_from_the_beginning_of_data() {
    let pool = empty_pool().await;
    apply_migrations(&pool, 1..=22).await;
    // September as the release before left it: nlp owns `nlp`; pod a is its, pod b (a `team`
    // label) search's, pod c (namespace `scratch`) no team's.
    sqlx::raw_sql(
        "select ensure_month_partition('usage_hourly', '2026-09-01');
         select ensure_month_partition('usage_daily', '2026-09-01');
         insert into team (team_id, display_name) values ('nlp', 'nlp'), ('search', 'search');
         insert into team_namespace (namespace, team_id) values ('nlp', 'nlp');
         insert into gpu (gpu_uuid, node, model, memory_bytes, compute_slices, memory_slices, mig_enabled)
             values ('GPU-1', 'n1', 'NVIDIA H100 80GB HBM3', 85520809984, 7, 8, false);
         insert into slice (slice_uuid, gpu_id, kind, compute_share, memory_share, memory_reserved_bytes, reserved)
             values ('GPU-1', 1, 'whole', 1, 1, 85520809984, true);
         insert into consumer (fingerprint, namespace, pod, team_label, team_id)
             values (decode(repeat('ab', 32), 'hex'), 'nlp', 'a', null, 'nlp'),
                    (decode(repeat('cd', 32), 'hex'), 'nlp', 'b', 'search', 'search'),
                    (decode(repeat('ef', 32), 'hex'), 'scratch', 'c', null, 'unattributed');
         insert into usage_hourly (hour, slice_id, gpu_id, consumer_id, held_seconds,
                                   memory_byte_seconds, memory_peak_bytes,
                                   compute_active_seconds, compute_known_seconds, window_count)
             values ('2026-09-01 00:00Z', 1, 1, 1, 3600, 0, 0, 0, 3600, 1),
                    ('2026-09-01 01:00Z', 1, 1, 2, 1800, 0, 0, 0, 1800, 1),
                    ('2026-09-01 02:00Z', 1, 1, 3, 600, 0, 0, 0, 600, 1);
         insert into usage_daily (day, slice_id, gpu_id, consumer_id, held_seconds,
                                  memory_byte_seconds, memory_peak_bytes,
                                  compute_active_seconds, compute_known_seconds, window_count)
             select date_trunc('day', hour, 'UTC'), slice_id, gpu_id, consumer_id,
                    sum(held_seconds), 0, 0, 0, sum(compute_known_seconds), sum(window_count)
             from usage_hourly group by 1, 2, 3, 4;
         select fill_team_day_rollups();",
    )
    .execute(&pool)
    .await
    .unwrap();
    let sums = "select team_id, sum(held_seconds) from period_slice_sums('2026-09-01', false)
                group by 1 order by 1";
    let lines =
        "select team_id, sum(held) from period_team_lines('2026-09-01') group by 1 order by 1";
    let before: Vec<(String, Decimal)> = sqlx::query_as(sums).fetch_all(&pool).await.unwrap();
    let lines_before: Vec<(String, Decimal)> =
        sqlx::query_as(lines).fetch_all(&pool).await.unwrap();
    assert_eq!(
        before,
        vec![
            ("nlp".into(), d("3600")),
            ("search".into(), d("1800")),
            ("unattributed".into(), d("600"))
        ]
    );
    apply_migrations(&pool, 23..=i64::MAX).await;
    let after: Vec<(String, Decimal)> = sqlx::query_as(sums).fetch_all(&pool).await.unwrap();
    let lines_after: Vec<(String, Decimal)> = sqlx::query_as(lines).fetch_all(&pool).await.unwrap();
    assert_eq!(before, after);
    assert_eq!(lines_before, lines_after);
    let versions: Vec<(String, chrono::DateTime<chrono::Utc>, Option<String>)> =
        sqlx::query_as("select namespace, effective_from, team_id from namespace_owner")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        versions,
        vec![(
            "nlp".into(),
            "2000-01-01T00:00:00Z".parse().unwrap(),
            Some("nlp".into())
        )]
    );
}

#[tokio::test]
async fn once_an_issued_month_is_credited_its_ownership_can_be_corrected_and_rebilled() {
    let app = TestApp::spawn().await;
    the_september_move(&app).await;
    let drafts = run(&app, "2026-09").await;
    for team in ["alpha", "beta"] {
        let id = &draft_of(&drafts, team)["id"];
        let r = crate::billing::issue(&app, id).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    let move_back = json!({"namespaces": [], "effective_from": "2026-09-16T00:00:00Z",
                           "reason": "beta gave it up on the 16th, not later"});
    let r = put(&app, &app.admin, "beta", move_back.clone()).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    for team in ["alpha", "beta"] {
        let id = &draft_of(&drafts, team)["id"];
        let r = app
            .send_json(
                "POST",
                Some(&app.admin),
                &format!("/v1/invoices/{id}/credit"),
                &json!({}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    let r = put(&app, &app.admin, "beta", move_back).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["reattributed_consumers"], 1);
    let again = run(&app, "2026-09").await;
    assert_eq!(dec(&draft_of(&again, "alpha")["total"]), d("576.00"));
    assert_eq!(
        dec(&draft_of(&again, "beta")["total"]),
        d("288.00"),
        "the 11th to the 15th"
    );
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(
        dec(&report.body["conservation"]["unattributed"]),
        d("288.00")
    );
}
