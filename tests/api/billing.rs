//! Rate cards, the monthly report and invoices, end to end through ingest and the API.
//!
//! The file stays whole: its scenarios share the worked example and the helpers the other files
//! import.

use std::str::FromStr;

use axum::http::StatusCode;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::domain::access::Role;

use crate::support::*;

/// DESIGN.md's worked example: the H100 cut `-cgi 9,19,19`, each instance held by one team for every
/// hour of `[first_day, first_day + days)` in one-hour windows, one batch a day.
pub async fn worked_example(app: &TestApp, first_day: &str, days: i64) {
    app.put_team("nlp", &["nlp"]).await;
    app.put_team("search", &["search"]).await;
    app.put_team("vision", &["vision"]).await;
    let t0: chrono::DateTime<chrono::Utc> = format!("{first_day}T00:00:00Z").parse().unwrap();
    for d in 0..days {
        let day = t0 + chrono::Duration::days(d);
        let mut windows = Vec::new();
        for h in 0..24 {
            let s = (day + chrono::Duration::hours(h)).to_rfc3339();
            let e = (day + chrono::Duration::hours(h + 1)).to_rfc3339();
            windows.push(window(MIG_3G, &s, &e, "nlp", "trainer-0", 3600.0));
            windows.push(window(MIG_1G_A, &s, &e, "search", "ranker-0", 3600.0));
            windows.push(window(MIG_1G_B, &s, &e, "vision", "detector-0", 3600.0));
        }
        let b = batch(
            &day.to_rfc3339(),
            &(day + chrono::Duration::days(1)).to_rfc3339(),
            windows,
        );
        let r = app.ingest(&app.admin, &b).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
}

pub async fn rate_card(app: &TestApp, from: &str, h100: &str) -> Reply {
    app.send_json(
        "POST",
        Some(&app.admin),
        "/v1/rate-cards",
        &json!({"effective_from": from, "currency": "USD", "default_hourly_cost": "3.00",
                "prices": {"NVIDIA H100 80GB HBM3": h100}}),
    )
    .await
}

pub fn dec(v: &Value) -> Decimal {
    Decimal::from_str(
        v.as_str()
            .unwrap_or_else(|| panic!("a decimal string, got {v}")),
    )
    .unwrap()
}

pub fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn team_costs(report: &Value) -> Vec<(String, Decimal)> {
    report["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["team"].as_str().unwrap().to_owned(), dec(&t["cost"])))
        .collect()
}

pub async fn run(app: &TestApp, period: &str) -> Reply {
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/invoices/runs",
            &json!({"period": period}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    r
}

pub fn draft_of<'a>(run: &'a Reply, team: &str) -> &'a Value {
    run.body["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["team"] == team)
        .unwrap_or_else(|| panic!("no draft for {team}: {run:?}"))
}

pub async fn issue(app: &TestApp, id: &Value) -> Reply {
    app.send_json(
        "POST",
        Some(&app.admin),
        &format!("/v1/invoices/{id}/issue"),
        &json!({}),
    )
    .await
}

#[tokio::test]
async fn the_worked_example_comes_out_to_the_cent_in_the_report_and_the_invoices() {
    let app = TestApp::spawn().await;
    assert_eq!(
        rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await.status,
        StatusCode::CREATED
    );
    worked_example(&app, "2026-09-01", 30).await;

    let r = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        team_costs(&r.body),
        vec![
            ("nlp".into(), d("1337.14")),
            ("search".into(), d("385.71")),
            ("vision".into(), d("385.71"))
        ]
    );
    let c = &r.body["conservation"];
    assert_eq!(dec(&c["fleet_cost"]), d("2880.00"));
    assert_eq!(dec(&c["team_charges"]), d("2108.56"));
    assert_eq!(dec(&c["unallocated"]), d("771.43"));
    assert_eq!(dec(&c["sharing_discount"]), d("0.00"));
    assert_eq!(dec(&c["rounding_residual"]), d("0.01"));
    // Independent of how the residual is defined: the fleet cost is the card's hours of September
    // at its rate, and the residual at most half a cent per rounded figure (three lines, the fleet
    // cost, unallocated capacity and the discount).
    assert_eq!(dec(&c["fleet_cost"]), d("30") * d("24") * d("4.00"));
    assert!(dec(&c["rounding_residual"]).abs() <= d("0.005") * d("6"));
    let nlp = &r.body["teams"][0];
    assert_eq!(dec(&nlp["slice_hours"]), d("720"));
    assert_eq!(dec(&nlp["gpu_equivalent_hours"]), d("334.285714"));
    // A quarter busy and 2 GB of its 39.5 GiB used: most of what it blocked sat idle, and the report
    // says what that idle part cost.
    let efficiency = dec(&nlp["efficiency"]);
    assert!(
        efficiency > d("0.1") && efficiency < d("0.2"),
        "{efficiency}"
    );
    let idle = dec(&nlp["idle_cost"]);
    assert!(
        (idle - d("1337.14") * (Decimal::ONE - efficiency)).abs() < d("0.10"),
        "{idle}"
    );

    let drafts = run(&app, "2026-09").await;
    assert_eq!(drafts.body["drafts"].as_array().unwrap().len(), 3);
    let nlp = draft_of(&drafts, "nlp");
    assert_eq!(nlp["status"], "draft");
    assert_eq!(dec(&nlp["total"]), d("1337.14"));
    let line = &nlp["lines"][0];
    assert_eq!(
        line["description"],
        "MIG 3g.40gb on NVIDIA H100 80GB HBM3 (rate card v1)"
    );
    assert_eq!(dec(&line["unit_price"]), d("4"));
    assert_eq!(dec(&line["slice_hours"]), d("720"));
    assert_eq!(line["windows"], 720);
    assert_eq!(line["rate_card"], 1);
    assert_eq!(dec(&draft_of(&drafts, "search")["total"]), d("385.71"));
}

#[tokio::test]
async fn a_rate_card_change_at_mid_month_prices_each_half_at_its_own_rate() {
    let app = TestApp::spawn().await;
    assert_eq!(
        rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        rate_card(&app, "2026-09-16T00:00:00Z", "6.00").await.status,
        StatusCode::CREATED
    );
    worked_example(&app, "2026-09-01", 30).await;
    let drafts = run(&app, "2026-09").await;
    let lines = draft_of(&drafts, "nlp")["lines"]
        .as_array()
        .unwrap()
        .clone();
    let by_card: Vec<(i64, Decimal, Decimal)> = lines
        .iter()
        .map(|l| {
            (
                l["rate_card"].as_i64().unwrap(),
                dec(&l["slice_hours"]),
                dec(&l["amount"]),
            )
        })
        .collect();
    // 360 hours at 4.00 and 360 at 6.00 of a 0.4642857 share.
    assert_eq!(
        by_card,
        vec![(1, d("360"), d("668.57")), (2, d("360"), d("1002.86"))]
    );
    let r = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(dec(&r.body["conservation"]["fleet_cost"]), d("3600.00"));
    assert_eq!(r.body["rate_cards"], json!([1, 2]));
}

#[tokio::test]
async fn hours_without_a_rate_card_are_refused_with_what_to_do() {
    let app = TestApp::spawn().await;
    worked_example(&app, "2026-09-01", 1).await;
    let r = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no rate card is in force") && message.contains("2026-09-01T00:00:00"),
        "{message}"
    );
}

#[tokio::test]
async fn issued_invoices_are_numbered_without_gaps_and_frozen_in_the_database_and_the_api() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 2).await;
    let drafts = run(&app, "2026-09").await;
    let ids: Vec<Value> = ["nlp", "search", "vision"]
        .iter()
        .map(|t| draft_of(&drafts, t)["id"].clone())
        .collect();

    let year = chrono::Utc::now().format("%Y").to_string();
    let first = issue(&app, &ids[0]).await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    assert_eq!(first.body["number"], format!("SM-{year}-000001"));
    assert_eq!(first.body["status"], "issued");
    // Issuing twice is refused and costs no number.
    let again = issue(&app, &ids[0]).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{again:?}");
    assert_eq!(
        issue(&app, &ids[1]).await.body["number"],
        format!("SM-{year}-000002")
    );

    let id = ids[0].as_i64().unwrap();
    for sql in [
        format!("update invoice set total = 0 where invoice_id = {id}"),
        format!("delete from invoice where invoice_id = {id}"),
        format!("update invoice_line set amount = 0 where invoice_id = {id}"),
        format!("delete from invoice_line where invoice_id = {id}"),
        format!(
            "insert into invoice_line (invoice_id, line_no, line_kind, description, slice_hours, gpu_equivalent_hours, exact_amount, amount) values ({id}, 99, 'usage', 'x', 0, 0, 0, 0)"
        ),
        format!("update invoice set status = 'void' where invoice_id = {id}"),
    ] {
        let err = sqlx::query(&sql).execute(&app.pool).await.unwrap_err();
        assert!(err.to_string().contains("cannot be"), "{sql}: {err}");
    }
    let stored = app
        .get(Some(&app.admin), &format!("/v1/invoices/{id}"))
        .await;
    assert_eq!(stored.body["total"], first.body["total"]);
    assert_eq!(stored.body["lines"], first.body["lines"]);

    // A new run leaves the issued invoices alone and replaces the remaining draft.
    let rerun = run(&app, "2026-09").await;
    assert_eq!(rerun.body["already_issued"], json!(["nlp", "search"]));
    assert_eq!(rerun.body["drafts"].as_array().unwrap().len(), 1);

    // Voiding takes a credit note, which gets the next number and reverses every line.
    let note = app
        .send_json(
            "POST",
            Some(&app.admin),
            &format!("/v1/invoices/{id}/credit"),
            &json!({}),
        )
        .await;
    assert_eq!(note.status, StatusCode::OK, "{note:?}");
    assert_eq!(note.body["kind"], "credit_note");
    assert_eq!(note.body["number"], format!("SM-{year}-000003"));
    assert_eq!(dec(&note.body["total"]), -dec(&first.body["total"]));
    let voided = app
        .get(Some(&app.admin), &format!("/v1/invoices/{id}"))
        .await;
    assert_eq!(voided.body["status"], "void");
    assert_eq!(voided.body["credited_by"], note.body["id"]);
    let numbers: Vec<i64> = sqlx::query_scalar(
        "select number_seq::int8 from invoice where number_seq is not null order by 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(numbers, vec![1, 2, 3]);
}

#[tokio::test]
async fn regenerating_a_draft_from_the_same_data_gives_identical_lines() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 3).await;
    let lines = |r: &Reply| -> Vec<Value> {
        r.body["drafts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| json!([i["team"], i["total"], i["lines"]]))
            .collect()
    };
    let a = run(&app, "2026-09").await;
    let b = run(&app, "2026-09").await;
    assert_eq!(lines(&a), lines(&b));
    // Each team's draft keeps its identity, so a reviewer's link survives a re-run.
    let ids = |r: &Reply| -> Vec<Value> {
        r.body["drafts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| json!([i["team"], i["id"]]))
            .collect()
    };
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(app.count("select count(*) from invoice").await, 3);
}

#[tokio::test]
async fn a_late_window_for_an_issued_period_becomes_a_correction_on_the_next_draft() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 29).await;
    let september = run(&app, "2026-09").await;
    let nlp_sep = draft_of(&september, "nlp").clone();
    assert_eq!(dec(&nlp_sep["total"]), d("1292.57"));
    for t in ["nlp", "search", "vision"] {
        assert_eq!(
            issue(&app, &draft_of(&september, t)["id"]).await.status,
            StatusCode::OK
        );
    }

    // The last day of September arrives after the invoices went out.
    worked_example(&app, "2026-09-30", 1).await;
    let october = run(&app, "2026-10").await;
    let fix = &draft_of(&october, "nlp")["lines"][0];
    assert_eq!(fix["line_kind"], "correction");
    assert_eq!(fix["corrects_period"], "2026-09");
    assert_eq!(
        fix["description"],
        "Correction for 2026-09: MIG 3g.40gb on NVIDIA H100 80GB HBM3 (rate card v1)"
    );
    assert_eq!(dec(&fix["slice_hours"]), d("24"));
    assert_eq!(dec(&fix["amount"]), d("1337.14") - d("1292.57"));
    // The issued invoice is as it was.
    let issued = app
        .get(Some(&app.admin), &format!("/v1/invoices/{}", nlp_sep["id"]))
        .await;
    assert_eq!(issued.body["status"], "issued");
    assert_eq!(dec(&issued.body["total"]), d("1292.57"));
    assert_eq!(issued.body["lines"], nlp_sep["lines"]);

    // Once the correction is issued, the next run finds nothing left to correct.
    for i in october.body["drafts"].as_array().unwrap() {
        assert_eq!(issue(&app, &i["id"]).await.status, StatusCode::OK);
    }
    let november = run(&app, "2026-11").await;
    assert_eq!(november.body["drafts"], json!([]), "{november:?}");
}

#[tokio::test]
async fn a_team_lead_reads_only_their_own_invoices_and_report_row() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 2).await;
    let drafts = run(&app, "2026-09").await;
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;

    let report = app.get(Some(&lead), "/v1/reports/monthly/2026-09").await;
    assert_eq!(report.status, StatusCode::OK);
    assert_eq!(team_costs(&report.body).len(), 1);
    assert_eq!(report.body["teams"][0]["team"], "nlp");
    assert!(report.body["conservation"].is_null());
    assert!(!report.body.to_string().contains("search"));

    let mine = app.get(Some(&lead), "/v1/invoices").await;
    assert_eq!(mine.body.as_array().unwrap().len(), 1);
    assert_eq!(mine.body[0]["team"], "nlp");
    let theirs = app.get(Some(&lead), "/v1/invoices?team=search").await;
    assert_eq!(theirs.status, StatusCode::FORBIDDEN);
    assert!(!theirs.body.to_string().contains("385"));
    let search_id = draft_of(&drafts, "search")["id"].clone();
    for uri in [
        format!("/v1/invoices/{search_id}"),
        format!("/v1/invoices/{search_id}.csv"),
    ] {
        let r = app.get(Some(&lead), &uri).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}");
        assert!(!r.body.to_string().contains("search"), "{r:?}");
    }
    let own = app
        .get(
            Some(&lead),
            &format!("/v1/invoices/{}", draft_of(&drafts, "nlp")["id"]),
        )
        .await;
    assert_eq!(own.status, StatusCode::OK);
    // Leads read; only finance and admins run, issue and credit.
    let r = app
        .send_json(
            "POST",
            Some(&lead),
            "/v1/invoices/runs",
            &json!({"period": "2026-09"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = app
        .send_json(
            "POST",
            Some(&lead),
            &format!("/v1/invoices/{}/issue", draft_of(&drafts, "nlp")["id"]),
            &json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn an_invoice_downloads_as_csv_with_one_row_per_line() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    rate_card(&app, "2026-09-02T00:00:00Z", "5.00").await;
    worked_example(&app, "2026-09-01", 2).await;
    let drafts = run(&app, "2026-09").await;
    let nlp = draft_of(&drafts, "nlp");
    let r = app
        .get(Some(&app.admin), &format!("/v1/invoices/{}.csv", nlp["id"]))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["content-type"], "text/csv; charset=utf-8");
    let disposition = r.headers["content-disposition"].to_str().unwrap();
    assert!(
        disposition.starts_with("attachment; filename=\"slicemeter-invoice-draft-"),
        "{disposition}"
    );
    assert!(disposition.ends_with("-nlp-2026-09.csv\""), "{disposition}");
    let text = r.body.as_str().unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers().unwrap().clone();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), nlp["lines"].as_array().unwrap().len());
    assert_eq!(rows.len(), 2, "one line per rate card version");
    let amount = headers.iter().position(|h| h == "amount").unwrap();
    let total: Decimal = rows.iter().map(|row| d(&row[amount])).sum();
    assert_eq!(total, dec(&nlp["total"]));
}

#[tokio::test]
async fn rate_cards_are_versions_that_are_never_edited() {
    let app = TestApp::spawn().await;
    let r = rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(r.body["version"], 1);
    assert_eq!(r.body["isolation_factors"]["timeslice"], "0.75");
    let r = rate_card(&app, "2026-08-01T00:00:00Z", "3.00").await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("must be later than")
    );
    let r = app
        .send_json("POST", Some(&app.admin), "/v1/rate-cards",
            &json!({"effective_from": "2026-10-01T00:30:00Z", "currency": "EURO", "default_hourly_cost": "1",
                    "weights": {"compute": "0.9", "memory": "0.2"}, "prices": {}}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    let fields: Vec<&str> = r.body["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, vec!["effective_from", "currency", "weights"]);
    let list = app.get(Some(&app.admin), "/v1/rate-cards").await;
    assert_eq!(list.body.as_array().unwrap().len(), 1);
    // In force since November: the database refuses edits and deletion.
    for sql in [
        "update rate_card set default_hourly_cost = 0",
        "delete from rate_card",
        "update rate_card_price set hourly_cost = 0",
    ] {
        let err = sqlx::query(sql).execute(&app.pool).await.unwrap_err();
        assert!(err.to_string().contains("cannot be"), "{sql}: {err}");
    }
    // A version may not start inside a period that has issued invoices.
    worked_example(&app, "2026-09-01", 1).await;
    let drafts = run(&app, "2026-09").await;
    issue(&app, &draft_of(&drafts, "nlp")["id"]).await;
    let r = rate_card(&app, "2026-09-20T00:00:00Z", "5.00").await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a period with issued invoices"),
        "{r:?}"
    );
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    assert_eq!(
        app.get(Some(&lead), "/v1/rate-cards").await.status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_loads_a_rate_card_and_runs_and_issues_a_period() {
    let app = TestApp::spawn().await;
    worked_example(&app, "2026-09-01", 2).await;
    let cli = |args: &[&str]| {
        let out = app.cli(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = cli(&["invoice", "issue", "--period", "2026-09"]);
    assert!(
        !ok && text.contains("there are no drafts for 2026-09"),
        "{text}"
    );
    let (ok, text) = cli(&["invoice", "run", "--period", "2026-09"]);
    assert!(!ok && text.contains("no rate card is in force"), "{text}");
    let (ok, text) = cli(&["rate-card", "load", "deploy/rate-card.example.toml"]);
    assert!(
        ok && text.contains("rate card version 1 published"),
        "{text}"
    );
    let (ok, text) = cli(&["invoice", "run", "--period", "2026-09"]);
    assert!(ok, "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("\tdraft\t")).count(),
        3,
        "{text}"
    );
    let (ok, text) = cli(&["invoice", "issue", "--period", "2026-09"]);
    assert!(ok, "{text}");
    let year = chrono::Utc::now().format("%Y").to_string();
    assert!(
        text.starts_with(&format!("SM-{year}-000001\tnlp\t2026-09\t89.14 USD")),
        "{text}"
    );
    assert_eq!(
        app.count("select count(*) from invoice where status = 'issued'")
            .await,
        3
    );
}

#[tokio::test]
async fn a_version_not_yet_in_force_can_be_withdrawn_once_and_one_far_ahead_is_refused() {
    let app = TestApp::spawn().await;
    assert_eq!(
        rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await.status,
        StatusCode::CREATED
    );
    // A year-9999 version used to be accepted, and then nothing could ever be published again.
    let r = rate_card(&app, "9999-12-31T00:00:00Z", "4.00").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(r.body["error"]["fields"][0]["field"], "effective_from");
    assert!(
        r.body["error"]["fields"][0]["message"]
            .as_str()
            .unwrap()
            .contains("more than 400 days ahead")
    );
    let ahead = (chrono::Utc::now() + chrono::Duration::days(30))
        .format("%Y-%m-%dT00:00:00Z")
        .to_string();
    let r = rate_card(&app, &ahead, "9.99").await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let version = r.body["version"].as_i64().unwrap();
    let finance = app.token(Role::Finance, None, None).await;
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let delete = |token: String, v: i64| {
        let app = &app;
        async move {
            app.send_json(
                "DELETE",
                Some(&token),
                &format!("/v1/rate-cards/{v}"),
                &json!({}),
            )
            .await
        }
    };
    assert_eq!(delete(lead, version).await.status, StatusCode::FORBIDDEN);
    // In force: never withdrawn.
    let r = delete(finance.clone(), 1).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is in force since")
    );
    let r = delete(finance.clone(), version).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{r:?}");
    assert_eq!(
        delete(finance.clone(), version).await.status,
        StatusCode::NOT_FOUND
    );
    let list = app.get(Some(&app.admin), "/v1/rate-cards").await;
    assert_eq!(list.body.as_array().unwrap().len(), 1);
    assert_eq!(list.body[0]["effective_until"], Value::Null);
    let audit = app
        .get(Some(&app.admin), "/v1/audit?action=rate_card.withdraw")
        .await;
    assert_eq!(audit.body[0]["subject"], format!("v{version}"));
    assert_eq!(audit.body[0]["actor_role"], "finance");
    // The corrected version can be published.
    assert_eq!(
        rate_card(&app, &ahead, "4.99").await.status,
        StatusCode::CREATED
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_takes_team_lead_spelt_either_way() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    for role in ["team_lead", "team-lead"] {
        let out = app.cli(&["token", "create", "--role", role, "--team", "nlp"]);
        assert!(out.status.success(), "{role}: {out:?}");
        let token = String::from_utf8(out.stdout).unwrap();
        let r = app.get(Some(token.trim()), "/v1/teams").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body[0]["team"], "nlp");
    }
}

/// The day rollup at the team's grain, summed afresh from the rollup per slice and consumer: what
/// ingest and team changes must have kept it equal to.
const TEAM_DAYS_FROM_SLICE_DAYS: &str = "
    select d.day, d.team_id, g.model, s.kind, s.profile, s.compute_share, s.memory_share,
           s.memory_reserved_bytes, sum(d.held_seconds), sum(d.memory_byte_seconds),
           sum(d.compute_active_seconds), sum(d.compute_known_seconds), sum(d.window_count)::int8
    from usage_daily d
    join slice s on s.slice_id = d.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    group by 1, 2, 3, 4, 5, 6, 7, 8";

const TEAM_DAYS: &str = "
    select day, team_id, model, kind, profile, compute_share, memory_share, memory_reserved_bytes,
           held_seconds, memory_byte_seconds, compute_active_seconds, compute_known_seconds,
           window_count
    from usage_team_daily";

async fn team_days_disagree(app: &TestApp) -> i64 {
    app.count(&format!(
        "select count(*) from (({TEAM_DAYS_FROM_SLICE_DAYS} except all {TEAM_DAYS})
                               union all ({TEAM_DAYS} except all {TEAM_DAYS_FROM_SLICE_DAYS})) x"
    ))
    .await
}

async fn send(app: &TestApp, start: &str, end: &str, windows: Vec<Vec<Value>>) {
    let r = app
        .ingest(&app.admin, &batch(start, end, windows.concat()))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

fn hours(day: &str, from: u32, to: u32, slice: &str, ns: &str, pod: &str) -> Vec<Value> {
    (from..to)
        .map(|h| {
            window(
                slice,
                &format!("{day}T{h:02}:00:00Z"),
                &format!("{day}T{:02}:00:00Z", h + 1),
                ns,
                pod,
                3600.0,
            )
        })
        .collect()
}

#[tokio::test]
// long: one scenario whose steps (team changes, a noon price, the books) build on each other
async fn the_team_day_rollup_bills_what_the_books_bill_through_team_changes_and_a_noon_price() {
    let app = TestApp::spawn().await;
    for (from, price) in [
        ("2026-09-01T00:00:00Z", "4.00"),
        ("2026-10-02T12:00:00Z", "6.00"),
    ] {
        assert_eq!(
            rate_card(&app, from, price).await.status,
            StatusCode::CREATED
        );
    }
    app.put_team("nlp", &["nlp"]).await;
    // `research` has no team yet: b and c are unattributed.
    send(
        &app,
        "2026-10-01T00:00:00Z",
        "2026-10-01T02:00:00Z",
        vec![
            hours("2026-10-01", 0, 1, MIG_3G, "nlp", "a"),
            hours("2026-10-01", 0, 1, MIG_1G_A, "research", "b"),
            hours("2026-10-01", 1, 2, MIG_1G_B, "research", "c"),
        ],
    )
    .await;
    // October 2nd is priced at 4.00 until noon and 6.00 after: c holds its slice after noon only.
    send(
        &app,
        "2026-10-02T10:00:00Z",
        "2026-10-02T14:00:00Z",
        vec![
            hours("2026-10-02", 10, 14, MIG_3G, "nlp", "a"),
            hours("2026-10-02", 11, 13, MIG_1G_A, "research", "b"),
            hours("2026-10-02", 13, 14, MIG_1G_B, "research", "c"),
        ],
    )
    .await;
    assert_eq!(
        app.count("select count(*) from usage_team_daily where team_id = 'unattributed'")
            .await,
        2
    );
    // research owns its namespace from before b and c held anything: both are research's.
    let put = app
        .put_team_from("research", &["research"], "2026-10-01T00:00:00Z")
        .await;
    assert_eq!(put.body["reattributed_consumers"], 2);
    assert_eq!(
        app.count("select count(*) from usage_team_daily where team_id = 'unattributed'")
            .await,
        0,
        "the days the consumers left are gone, not kept at zero"
    );
    send(
        &app,
        "2026-10-03T00:00:00Z",
        "2026-10-03T02:00:00Z",
        vec![
            hours("2026-10-03", 0, 1, MIG_1G_A, "research", "b"),
            hours("2026-10-03", 1, 2, MIG_1G_A, "research", "d"),
            hours("2026-10-03", 0, 1, MIG_3G, "nlp", "a"),
        ],
    )
    .await;
    // nlp gives its namespace up at 12:30 on the 2nd and takes it back at the same instant: a's
    // hours from then go to `unattributed` (its 12:00 window split in halves) and return.
    assert_eq!(
        app.put_team_from("nlp", &[], "2026-10-02T12:30:00Z")
            .await
            .body["reattributed_consumers"],
        1
    );
    assert_eq!(
        app.count(
            "select count(*) from usage_team_daily
             where team_id = 'unattributed' and model like '%H100%' and profile = '3g.40gb'
               and held_seconds = 1.5 * 3600"
        )
        .await,
        1,
        "12:30 to 14:00 on the 2nd"
    );
    assert_eq!(
        app.count("select count(*) from usage_team_daily where team_id = 'nlp'")
            .await,
        2,
        "the 1st, and the 2nd until 12:30"
    );
    assert_eq!(team_days_disagree(&app).await, 0);
    assert_eq!(
        app.put_team_from("nlp", &["nlp"], "2026-10-02T12:30:00Z")
            .await
            .body["reattributed_consumers"],
        1
    );
    assert_eq!(team_days_disagree(&app).await, 0);
    assert_eq!(
        app.count("select count(*) from usage_hourly where team_id = 'unattributed'")
            .await,
        0,
        "the split hour is whole again"
    );
    // nlp and research on each of the three days.
    assert_eq!(
        app.count(&format!("select count(*) from ({TEAM_DAYS}) x"))
            .await,
        6
    );
    assert_eq!(
        app.count(
            "select count(*) from (
                 (select date_trunc('month', day, 'UTC'), gpu_id, slice_id, consumer_id,
                         team_id, bit_or(day_bit(day))
                  from usage_daily group by 1, 2, 3, 4, 5
                  except all
                  select month, gpu_id, slice_id, consumer_id, team_id, days
                  from usage_month_days)
                 union all
                 (select month, gpu_id, slice_id, consumer_id, team_id, days
                  from usage_month_days
                  except all
                  select date_trunc('month', day, 'UTC'), gpu_id, slice_id, consumer_id,
                         team_id, bit_or(day_bit(day))
                  from usage_daily group by 1, 2, 3, 4, 5)) x"
        )
        .await,
        0
    );

    // What the month's report reads (the team's day rows) against what the invoice run priced
    // (the books it wrote, a row per slice): every line alike, slices counted once.
    let october: slicemeter::domain::time::Month = "2026-10".parse().unwrap();
    let mut conn = app.pool.acquire().await.unwrap();
    let (from_rollups, gap) =
        slicemeter::billing::store::usage_aggregates(&mut conn, october, false, None)
            .await
            .unwrap();
    assert_eq!(gap, None);
    let lines: Vec<(String, Option<String>, i64, i64, Decimal)> = from_rollups
        .iter()
        .map(|(u, _)| {
            (
                u.team.as_str().to_owned(),
                u.profile.clone(),
                u.rate_card,
                u.slices,
                u.sums.held_seconds / Decimal::from(3600),
            )
        })
        .collect();
    let line = |team: &str, profile: &str, card: i64, slices: i64, hours: i64| {
        (
            team.to_owned(),
            Some(profile.to_owned()),
            card,
            slices,
            Decimal::from(hours),
        )
    };
    assert_eq!(
        lines,
        vec![
            // 1 h on the 1st, 2 h on the 2nd before noon; 2 h after it and 1 h on the 3rd.
            line("nlp", "3g.40gb", 1, 1, 3),
            line("nlp", "3g.40gb", 2, 1, 3),
            // b and c on the 1st and b before noon; b and c after it (c's slice only then), b and
            // d on the 3rd (one slice, two pods).
            line("research", "1g.10gb", 1, 2, 3),
            line("research", "1g.10gb", 2, 2, 4),
        ]
    );
    let drafts = run(&app, "2026-10").await;
    assert_eq!(
        dec(&draft_of(&drafts, "research")["lines"][1]["slice_hours"]),
        d("4")
    );
    let (from_books, _) =
        slicemeter::billing::store::usage_aggregates(&mut conn, october, true, None)
            .await
            .unwrap();
    assert_eq!(from_rollups, from_books);
}

#[tokio::test]
async fn a_team_change_while_batches_arrive_leaves_every_day_with_one_team() {
    let app = TestApp::spawn().await;
    send(
        &app,
        "2026-10-01T00:00:00Z",
        "2026-10-01T01:00:00Z",
        vec![hours("2026-10-01", 0, 1, MIG_1G_A, "research", "b")],
    )
    .await;
    // Hour after hour of research's pod while research is given its namespace, back and forth.
    let batches = async {
        for h in 1..23 {
            send(
                &app,
                &format!("2026-10-01T{h:02}:00:00Z"),
                &format!("2026-10-01T{:02}:00:00Z", h + 1),
                vec![
                    hours("2026-10-01", h, h + 1, MIG_1G_A, "research", "b"),
                    hours("2026-10-01", h, h + 1, MIG_1G_B, "research", "c"),
                ],
            )
            .await;
        }
    };
    let changes = async {
        for claim in [true, false, true, false, true] {
            let namespaces: &[&str] = if claim { &["research"] } else { &[] };
            app.put_team("research", namespaces).await;
            tokio::task::yield_now().await;
        }
    };
    tokio::join!(batches, changes);
    assert_eq!(team_days_disagree(&app).await, 0);
    assert_eq!(
        app.count(
            "select count(*) from usage_team_daily
             where team_id = 'research' and held_seconds = 45 * 3600 and window_count = 45"
        )
        .await,
        1,
        "the day's 45 slice-hours are research's, in one row"
    );
}
