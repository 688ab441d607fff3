//! Books finance can sign: a period's life (open, closed, issued), frozen books once issued, late
//! data billed once on a later period, `unattributed` never invoiced, runs and issues that race, and
//! exports that cannot pass a half file or a spreadsheet formula for the real thing.
//!
//! The file stays whole: a period's life is one story, each test a chapter of it on the same
//! helpers.

use axum::http::StatusCode;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::domain::access::Role;
use slicemeter::http::state::ServerConfig;

use crate::billing::{d, dec, draft_of, rate_card, run, worked_example};
use crate::support::*;

async fn issue_all(app: &TestApp, period: &str) -> Reply {
    app.send_json(
        "POST",
        Some(&app.admin),
        "/v1/invoices/issue",
        &json!({"period": period}),
    )
    .await
}

async fn raw(app: &TestApp, uri: &str) -> String {
    let r = app.get(Some(&app.admin), uri).await;
    assert_eq!(r.status, StatusCode::OK, "{uri}: {r:?}");
    match r.body {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

fn message(r: &Reply) -> String {
    r.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn csv_rows(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let headers = r.headers().unwrap().iter().map(str::to_owned).collect();
    let rows = r
        .records()
        .map(|rec| rec.unwrap().iter().map(str::to_owned).collect())
        .collect();
    (headers, rows)
}

#[tokio::test]
async fn an_issued_month_stays_byte_identical_and_late_data_is_billed_once_next_month() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 29).await;
    run(&app, "2026-09").await;
    let issued = issue_all(&app, "2026-09").await;
    assert_eq!(issued.status, StatusCode::OK, "{issued:?}");
    assert_eq!(issued.body.as_array().unwrap().len(), 3);
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(report.body["state"], "issued");
    let focus = raw(&app, "/v1/exports/focus?period=2026-09").await;
    let erp = raw(&app, "/v1/exports/erp?period=2026-09").await;

    // The month's last day arrives late, and the team is renamed and moves cost center.
    worked_example(&app, "2026-09-30", 1).await;
    app.send_json(
        "PUT",
        Some(&app.admin),
        "/v1/teams/nlp",
        &json!({"display_name": "Language", "cost_center": "CC-NEW"}),
    )
    .await;
    let after = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    for block in [
        "teams",
        "conservation",
        "rate_cards",
        "unattributed",
        "state",
    ] {
        assert_eq!(after.body[block], report.body[block], "{block}");
    }
    assert_eq!(raw(&app, "/v1/exports/focus?period=2026-09").await, focus);
    assert_eq!(raw(&app, "/v1/exports/erp?period=2026-09").await, erp);
    // What came late waits as a pending correction: the last day's share of each team.
    let pending: Vec<(String, Decimal)> = after.body["pending_corrections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["team"].as_str().unwrap().to_owned(), dec(&p["amount"])))
        .collect();
    assert_eq!(
        pending,
        vec![
            ("nlp".into(), d("1337.14") - d("1292.57")),
            ("search".into(), d("385.71") - d("372.86")),
            ("vision".into(), d("385.71") - d("372.86")),
        ]
    );
    // A team lead sees their own.
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let own = app.get(Some(&lead), "/v1/reports/monthly/2026-09").await;
    assert_eq!(own.body["pending_corrections"].as_array().unwrap().len(), 1);
    assert_eq!(own.body["pending_corrections"][0]["team"], "nlp");

    // October's invoices bill it once, as corrections, and October's FOCUS rows add up to them.
    let october = run(&app, "2026-10").await;
    let fix = &draft_of(&october, "nlp")["lines"][0];
    assert_eq!(fix["line_kind"], "correction");
    assert_eq!(fix["corrects_period"], "2026-09");
    assert_eq!(dec(&fix["amount"]), d("44.57"));
    let text = raw(&app, "/v1/exports/focus?period=2026-10").await;
    let (headers, rows) = csv_rows(&text);
    let col = |n: &str| headers.iter().position(|h| h == n).unwrap();
    let corrections: Vec<&Vec<String>> = rows
        .iter()
        .filter(|r| r[col("ChargeClass")] == "Correction")
        .collect();
    assert_eq!(corrections.len(), 3);
    for team in ["nlp", "search", "vision"] {
        let sum: Decimal = rows
            .iter()
            .filter(|r| r[col("SubAccountId")] == team)
            .map(|r| d(&r[col("BilledCost")]))
            .sum();
        assert_eq!(sum, dec(&draft_of(&october, team)["total"]), "{team}");
    }
    assert_eq!(issue_all(&app, "2026-10").await.status, StatusCode::OK);
    let settled = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(settled.body["pending_corrections"], json!([]));
    // Nothing is billed twice: November has nothing to correct.
    assert_eq!(run(&app, "2026-11").await.body["drafts"], json!([]));
    assert_eq!(raw(&app, "/v1/exports/focus?period=2026-09").await, focus);
}

/// A pod restarted on a MIG instance is a second consumer of its team that day. The books keep
/// such a day once per consumer (migration 0021), yet the issued month's FOCUS export still has one
/// row per slice and day (and per rate card version on a day a version starts at noon), with the
/// figures it had before the month was issued.
#[tokio::test]
async fn a_slice_two_pods_of_a_team_held_in_a_day_is_one_focus_row_before_and_after_issuing() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    rate_card(&app, "2026-09-02T12:00:00Z", "5.00").await;
    app.put_team("nlp", &["nlp"]).await;
    // The 3g instance: trainer-0 until noon of the 1st, trainer-1 until 06:00 of the 2nd, then
    // trainer-2; one batch a day.
    let t0: chrono::DateTime<chrono::Utc> = "2026-09-01T00:00:00Z".parse().unwrap();
    for d in 0..2 {
        let day = t0 + chrono::Duration::days(d);
        let windows = (0..24)
            .map(|h| {
                let pod = match (d, h) {
                    (0, 0..12) => "trainer-0",
                    (0, _) | (1, 0..6) => "trainer-1",
                    _ => "trainer-2",
                };
                let s = (day + chrono::Duration::hours(h)).to_rfc3339();
                let e = (day + chrono::Duration::hours(h + 1)).to_rfc3339();
                window(MIG_3G, &s, &e, "nlp", pod, 3600.0)
            })
            .collect();
        let b = batch(
            &day.to_rfc3339(),
            &(day + chrono::Duration::days(1)).to_rfc3339(),
            windows,
        );
        assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);
    }
    let drafted = run(&app, "2026-09").await;
    let slice_rows = |text: &str| -> Vec<Vec<String>> {
        let (headers, rows) = csv_rows(text);
        let col = |n: &str| headers.iter().position(|h| h == n).unwrap();
        rows.iter()
            .filter(|r| r[col("ResourceId")] == MIG_3G)
            .map(|r| {
                [
                    "ChargePeriodStart",
                    "ConsumedQuantity",
                    "ListCost",
                    "BilledCost",
                ]
                .iter()
                .map(|n| r[col(n)].clone())
                .collect()
            })
            .collect()
    };
    let before = slice_rows(&raw(&app, "/v1/exports/focus?period=2026-09").await);
    assert_eq!(issue_all(&app, "2026-09").await.status, StatusCode::OK);
    // The books hold the 1st twice (two pods) and the 2nd's morning twice, under the first card.
    let entries: Vec<i32> = sqlx::query_scalar(
        "select cardinality(days) from book_slice where slice_uuid = $1 order by first_day, rate_card_id",
    )
    .bind(MIG_3G)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(entries, vec![4, 1]);
    let text = raw(&app, "/v1/exports/focus?period=2026-09").await;
    let after = slice_rows(&text);
    assert_eq!(after, before);
    let days: Vec<(&str, &str)> = after
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    assert_eq!(
        days,
        vec![
            ("2026-09-01T00:00:00Z", "24.000000"),
            ("2026-09-02T00:00:00Z", "12.000000"),
            ("2026-09-02T00:00:00Z", "12.000000"),
        ]
    );
    // And the team's rows add up to its invoice.
    let (headers, rows) = csv_rows(&text);
    let col = |n: &str| headers.iter().position(|h| h == n).unwrap();
    let billed: Decimal = rows
        .iter()
        .filter(|r| r[col("SubAccountId")] == "nlp")
        .map(|r| d(&r[col("BilledCost")]))
        .sum();
    assert_eq!(billed, dec(&draft_of(&drafted, "nlp")["total"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_month_is_drafted_only_once_it_has_ended_and_issued_only_after_its_grace() {
    let app = TestApp::with_config(ServerConfig {
        ingest_rate: 0.0,
        billing: slicemeter::billing::service::BillingConfig {
            issue_grace: chrono::Duration::days(3650),
        },
        ..test_config()
    })
    .await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 2).await;
    let now = chrono::Utc::now();
    let this = now.format("%Y-%m").to_string();
    let next_month = slicemeter::domain::time::Month::of(now).end();
    for period in [this.clone(), "2099-01".to_owned()] {
        let r = app
            .send_json(
                "POST",
                Some(&app.admin),
                "/v1/invoices/runs",
                &json!({"period": period}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
        assert!(message(&r).contains("has not ended"), "{r:?}");
    }
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/invoices/runs",
            &json!({"period": this}),
        )
        .await;
    assert!(
        message(&r).contains(&format!(
            "it can be drafted from {}",
            next_month.to_rfc3339()
        )),
        "{r:?}"
    );
    assert_eq!(app.count("select count(*) from invoice").await, 0);

    // September has ended, but a ten-year grace keeps it open for late data.
    let drafts = run(&app, "2026-09").await;
    let one = app
        .send_json(
            "POST",
            Some(&app.admin),
            &format!("/v1/invoices/{}/issue", draft_of(&drafts, "nlp")["id"]),
            &json!({}),
        )
        .await;
    let all = issue_all(&app, "2026-09").await;
    for r in [&one, &all] {
        assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
        assert!(
            message(r).contains("is in its grace period for late data (3650 days)")
                && message(r).contains("its invoices can be issued from 2036-"),
            "{r:?}"
        );
    }
    assert_eq!(
        app.count("select count(*) from invoice where status <> 'draft'")
            .await,
        0
    );
    // The CLI keeps the same rule.
    let out = app.cli(&[
        "invoice",
        "issue",
        "--period",
        "2026-09",
        "--issue-grace",
        "3650d",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("grace period for late data"));
}

#[tokio::test]
async fn unattributed_usage_is_never_invoiced_and_stays_with_the_platform_named() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    app.put_team("nlp", &["nlp"]).await;
    app.put_team("search", &["search"]).await;
    let mut windows = Vec::new();
    let t0: chrono::DateTime<chrono::Utc> = "2026-09-01T00:00:00Z".parse().unwrap();
    for h in 0..24 {
        let s = (t0 + chrono::Duration::hours(h)).to_rfc3339();
        let e = (t0 + chrono::Duration::hours(h + 1)).to_rfc3339();
        windows.push(window(MIG_3G, &s, &e, "nlp", "trainer-0", 3600.0));
        windows.push(window(MIG_1G_A, &s, &e, "search", "ranker-0", 3600.0));
        windows.push(window(MIG_1G_B, &s, &e, "scratch", "notebook-7", 3600.0));
    }
    let b = batch("2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z", windows);
    assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    let teams: Vec<&str> = report.body["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["team"].as_str().unwrap())
        .collect();
    assert_eq!(teams, vec!["nlp", "search"]);
    let u = &report.body["unattributed"];
    assert_eq!(dec(&u["cost"]), d("12.86"));
    assert_eq!(u["consumers"][0]["namespace"], "scratch");
    assert_eq!(u["consumers"][0]["pod"], "notebook-7");
    assert_eq!(dec(&u["consumers"][0]["slice_hours"]), d("24"));
    let c = &report.body["conservation"];
    assert_eq!(dec(&c["unattributed"]), d("12.86"));
    // Independent of how the residual is defined: the fleet cost is the card's 24 hours at its
    // rate, the two teams' charges are their lines, and the residual at most half a cent per
    // rounded figure (three lines, the fleet cost, unallocated capacity and the discount).
    assert_eq!(dec(&c["fleet_cost"]), d("24") * d("4.00"));
    let charged: Decimal = report.body["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| dec(&t["cost"]))
        .sum();
    assert_eq!(dec(&c["team_charges"]), charged);
    assert!(dec(&c["rounding_residual"]).abs() <= d("0.005") * d("6"));
    let drafts = run(&app, "2026-09").await;
    let invoiced: Vec<&str> = drafts.body["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["team"].as_str().unwrap())
        .collect();
    assert_eq!(invoiced, vec!["nlp", "search"]);
    assert_eq!(issue_all(&app, "2026-09").await.status, StatusCode::OK);
    // The journal works: every invoiced team has its accounts.
    let erp = app
        .get(Some(&app.admin), "/v1/exports/erp?period=2026-09")
        .await;
    assert_eq!(erp.status, StatusCode::OK, "{erp:?}");
    // FOCUS puts it on the platform's account, and the file still sums to the fleet cost.
    let (headers, rows) = csv_rows(&raw(&app, "/v1/exports/focus?period=2026-09").await);
    let col = |n: &str| headers.iter().position(|h| h == n).unwrap();
    let on_platform: Decimal = rows
        .iter()
        .filter(|r| r[col("Tags")].contains("\"slicemeter/platform\":\"unattributed\""))
        .inspect(|r| assert_eq!(r[col("SubAccountId")], "platform"))
        .map(|r| d(&r[col("BilledCost")]))
        .sum();
    assert_eq!(on_platform, d("12.86"));
    assert!(
        rows.iter()
            .all(|r| r[col("SubAccountId")] != "unattributed")
    );
    let total: Decimal = rows.iter().map(|r| d(&r[col("BilledCost")])).sum();
    assert_eq!(total, dec(&c["fleet_cost"]));

    // Claimed later, September stays as it was issued: a claim dated inside it is refused, and one
    // from now on bills nothing of it.
    let claim = |body: Value| {
        let app = &app;
        async move {
            app.send_json("PUT", Some(&app.admin), "/v1/teams/vision", &body)
                .await
        }
    };
    let r = claim(
        json!({"namespaces": ["scratch"], "effective_from": "2026-09-01T00:00:00Z",
                         "reason": "the notebook was vision's"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    assert!(
        message(&r).contains("2026-09, a period with issued invoices"),
        "{r:?}"
    );
    let r = claim(json!({"namespaces": ["scratch"]})).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let october = run(&app, "2026-10").await;
    assert_eq!(october.body["drafts"], json!([]), "{october:?}");
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(report.body["pending_corrections"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_issues_and_credits_at_once_answer_2xx_or_409_and_numbers_stay_gap_free() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-08-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-08-29", 4).await;
    let august = run(&app, "2026-08").await;
    let run_body = json!({"period": "2026-09"});
    let mut calls = Vec::new();
    for k in 0..12 {
        let (uri, body) = match k % 4 {
            0 => ("/v1/invoices/runs".to_owned(), run_body.clone()),
            1 => ("/v1/invoices/issue".to_owned(), run_body.clone()),
            2 => (
                format!(
                    "/v1/invoices/{}/issue",
                    draft_of(&august, ["nlp", "search", "vision"][k % 3])["id"]
                ),
                json!({}),
            ),
            _ => (
                format!("/v1/invoices/{}/credit", draft_of(&august, "nlp")["id"]),
                json!({}),
            ),
        };
        calls.push((uri, body));
    }
    let replies = futures_util::future::join_all(
        calls
            .iter()
            .map(|(uri, body)| app.send_json("POST", Some(&app.admin), uri, body)),
    )
    .await;
    for (r, (uri, _)) in replies.iter().zip(&calls) {
        assert!(
            r.status == StatusCode::OK || r.status == StatusCode::CONFLICT,
            "{uri}: {r:?}"
        );
    }
    let numbers: Vec<i64> = sqlx::query_scalar(
        "select number_seq::int8 from invoice where number_seq is not null order by 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(!numbers.is_empty());
    assert_eq!(numbers, (1..=numbers.len() as i64).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_correction_drafted_on_two_months_is_issued_once_and_the_stale_draft_is_refused() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-07-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-07-01", 30).await;
    run(&app, "2026-07").await;
    assert_eq!(issue_all(&app, "2026-07").await.status, StatusCode::OK);
    worked_example(&app, "2026-07-31", 1).await;
    // September is drafted first, then August: both carry July's corrections.
    let september = run(&app, "2026-09").await;
    let august = run(&app, "2026-08").await;
    for r in [&september, &august] {
        assert_eq!(draft_of(r, "nlp")["lines"][0]["corrects_period"], "2026-07");
    }
    assert_eq!(issue_all(&app, "2026-08").await.status, StatusCode::OK);
    let stale = issue_all(&app, "2026-09").await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{stale:?}");
    assert!(
        message(&stale).contains("corrections for 2026-07 are out of date"),
        "{stale:?}"
    );
    assert_eq!(
        app.count("select count(*) from invoice where period = '2026-09-01' and status = 'issued'")
            .await,
        0,
        "all or none"
    );
    // Run again, September has nothing left to correct.
    assert_eq!(run(&app, "2026-09").await.body["drafts"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_focus_export_cut_off_half_way_ends_in_an_error_not_a_clean_end() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 1).await;
    run(&app, "2026-09").await;
    // A month of many slices (written straight into its books, as a big fleet's run would), so that
    // the export is still reading rows when the database goes away.
    // Each a slice of its own, with a windows' worth of held seconds on each of its days (each
    // row of the books carries its sums and its days).
    sqlx::query(
        "insert into book_slice
         select period, team_id, team_name, cost_center, model, kind, profile, rate_card_id,
                slice_id, 'MIG-filler-' || n, node, compute_share, memory_share,
                memory_reserved_bytes, cardinality(days), first_day, cardinality(days),
                cardinality(days), 0, 0, days, array_fill(1::int8, array[cardinality(days)]),
                array_fill(1::numeric, array[cardinality(days)]),
                array_fill(1::numeric, array[cardinality(days)]),
                array_fill(0::numeric, array[cardinality(days)]),
                array_fill(0::numeric, array[cardinality(days)])
         from book_slice, generate_series(1, 100000) n
         where period = '2026-09-01' and team_id = 'nlp'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    // ... and the GPUs they sit on, so that the month still adds up.
    sqlx::query(
        "insert into book_model_day select period, model, rate_card_id, day, 1e6
         from book_model_day where period = '2026-09-01'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let r = issue_all(&app, "2026-09").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let served = app.serve(test_config()).await;
    let base = &served.base;
    let mut response = reqwest::Client::new()
        .get(format!("{base}/v1/exports/focus?period=2026-09"))
        .bearer_auth(&app.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"AvailabilityZone,BilledCost"));
    // The header comes alone, before the rows are read: their first chunk says the cursor is open
    // (and held open by the chunks the client has not read yet).
    let rows = response.chunk().await.unwrap().unwrap();
    // The database drops the export's cursor half way (a failover, an operator's kill).
    let killed: Vec<bool> = sqlx::query_scalar(
        "select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and pid <> pg_backend_pid()
           and state = 'active' and query like '%period_slice_day%'",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        killed,
        vec![true],
        "the export was reading when it was cut off"
    );
    let mut bytes = first.len() + rows.len();
    let ended = loop {
        match response.chunk().await {
            Ok(Some(b)) => bytes += b.len(),
            Ok(None) => break "a clean end",
            Err(_) => break "an error",
        }
    };
    assert_eq!(
        ended, "an error",
        "after {bytes} bytes the client was told the file was whole"
    );
    served.stop().await;
}

#[tokio::test]
async fn cells_a_spreadsheet_would_run_are_quoted_in_every_csv_and_numbers_stay_numbers() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    let mut b = batch("2026-09-01T00:00:00Z", "2026-09-01T01:00:00Z", vec![]);
    b["gpus"][0]["model"] = json!("=cmd|' /C calc'!A0");
    b["windows"] = json!([window(
        MIG_3G,
        "2026-09-01T00:00:00Z",
        "2026-09-01T01:00:00Z",
        "nlp",
        "p",
        3600.0
    )]);
    assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/nlp",
            &json!({"display_name": "=HYPERLINK(\"http://evil\")", "namespaces": ["nlp"],
                    "cost_center": "+1234", "gl_account": "@SUM(A1)",
                    "effective_from": "2026-09-01T00:00:00Z", "reason": "=1+1"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let drafts = run(&app, "2026-09").await;
    let id = draft_of(&drafts, "nlp")["id"].clone();
    assert_eq!(issue_all(&app, "2026-09").await.status, StatusCode::OK);
    let note = app
        .send_json(
            "POST",
            Some(&app.admin),
            &format!("/v1/invoices/{id}/credit"),
            &json!({}),
        )
        .await;
    assert_eq!(note.status, StatusCode::OK, "{note:?}");

    let focus = raw(&app, "/v1/exports/focus?period=2026-09").await;
    let (h, rows) = csv_rows(&focus);
    let col = |n: &str| h.iter().position(|x| x == n).unwrap();
    let nlp = rows
        .iter()
        .find(|r| r[col("SubAccountId")] == "nlp")
        .unwrap();
    assert_eq!(nlp[col("SubAccountName")], "'=HYPERLINK(\"http://evil\")");
    assert_eq!(nlp[col("x_GpuModel")], "'=cmd|' /C calc'!A0");
    assert!(nlp[col("SkuId")].starts_with("'=cmd"));
    let erp = raw(&app, "/v1/exports/erp?period=2026-09").await;
    let (h, rows) = csv_rows(&erp);
    let col = |n: &str| h.iter().position(|x| x == n).unwrap();
    assert!(
        rows.iter().any(|r| r[col("cost_center")] == "'+1234"),
        "{erp}"
    );
    assert!(
        rows.iter().any(|r| r[col("gl_account")] == "'@SUM(A1)"),
        "{erp}"
    );
    let invoice = raw(&app, &format!("/v1/invoices/{}.csv", note.body["id"])).await;
    let (h, rows) = csv_rows(&invoice);
    let col = |n: &str| h.iter().position(|x| x == n).unwrap();
    assert_eq!(rows[0][col("gpu_model")], "'=cmd|' /C calc'!A0");
    // A credit note's negative amount is a number, not quoted text.
    assert!(rows[0][col("amount")].starts_with('-'), "{invoice}");
    assert!(d(&rows[0][col("amount")]) < Decimal::ZERO);
    // No cell of any of them starts with a formula character.
    for text in [&focus, &erp, &invoice] {
        let (h, rows) = csv_rows(text);
        let numeric = [
            "BilledCost",
            "ContractedCost",
            "EffectiveCost",
            "ListCost",
            "debit",
            "credit",
            "amount",
            "slice_hours",
            "gpu_equivalent_hours",
            "unit_price",
        ];
        for r in &rows {
            for (name, cell) in h.iter().zip(r) {
                if !numeric.contains(&name.as_str()) {
                    assert!(
                        !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                        "{name}: {cell:?}"
                    );
                }
            }
        }
    }
}

/// Reads until the server closes the connection; what it sent, and how long that took.
async fn until_closed(stream: &mut tokio::net::TcpStream) -> (String, std::time::Duration) {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(20), stream.read(&mut buf)).await
        {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept the connection open for 20 s"),
        }
    }
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_trickles_its_headers_or_stalls_its_body_is_cut_off() {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::spawn().await;
    let served = app
        .serve(ServerConfig {
            header_read_timeout: std::time::Duration::from_secs(1),
            idle_timeout: std::time::Duration::from_secs(2),
            request_timeout: std::time::Duration::from_secs(1),
            ..test_config()
        })
        .await;
    let addr = &served.addr;
    // Half a header block, then nothing.
    let mut half = tokio::net::TcpStream::connect(&addr).await.unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (_, took) = until_closed(&mut half).await;
    assert!(
        took < std::time::Duration::from_secs(5),
        "closed after {took:?}"
    );
    // Whole headers, a body promised and never sent.
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stalled
        .write_all(
            format!(
                "POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
                app.admin
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let (_, took) = until_closed(&mut stalled).await;
    assert!(
        took < std::time::Duration::from_secs(8),
        "closed after {took:?}"
    );
    // A well-behaved client is served as before.
    let ok = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    served.stop().await;
}

#[tokio::test]
async fn the_sign_in_page_shows_only_messages_of_its_own() {
    let app = TestApp::spawn().await;
    let r = app
        .get(
            None,
            "/ui/signin?failed=Your+account+is+locked.+Call+555-0100",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let page = r.body.as_str().unwrap();
    assert!(
        !page.contains("555-0100") && !page.contains("locked"),
        "{page}"
    );
    assert!(page.contains("That token is not valid"), "{page}");
    let r = app.get(None, "/ui/signin?failed=collector").await;
    assert!(
        r.body
            .as_str()
            .unwrap()
            .contains("Collector and importer tokens send data")
    );
    let r = app.get(None, "/ui/signin").await;
    assert!(!r.body.as_str().unwrap().contains("class=\"error\""));
}

#[tokio::test]
async fn an_upgrade_freezes_months_issued_before_books_were_kept_and_drops_unattributed_drafts() {
    let pool = empty_pool().await;
    apply_migrations(&pool, 1..=6).await;
    // September as an older version left it: usage, an issued invoice, a draft for unattributed.
    sqlx::raw_sql(
        "select ensure_month_partition('usage_hourly', '2026-09-01');
         select ensure_month_partition('gpu_hourly', '2026-09-01');
         insert into team (team_id, display_name) values ('nlp', 'nlp');
         insert into rate_card (effective_from, currency, minor_units, weight_compute, weight_memory,
                                factor_mig, factor_whole, factor_mps, factor_vgpu, factor_timeslice,
                                idle_policy, default_hourly_cost)
             values ('2026-09-01Z', 'USD', 2, 0.5, 0.5, 1, 1, 0.9, 0.9, 0.75, 'platform', 4);
         insert into gpu (gpu_uuid, node, model, memory_bytes, compute_slices, memory_slices, mig_enabled)
             values ('GPU-1', 'n1', 'NVIDIA H100 80GB HBM3', 85520809984, 7, 8, false);
         insert into slice (slice_uuid, gpu_id, kind, compute_share, memory_share, memory_reserved_bytes, reserved)
             values ('GPU-1', 1, 'whole', 1, 1, 85520809984, true);
         insert into consumer (fingerprint, namespace, team_id)
             values (decode(repeat('ab', 32), 'hex'), 'nlp', 'nlp'),
                    (decode(repeat('cd', 32), 'hex'), 'scratch', 'unattributed');
         insert into usage_hourly values ('2026-09-01 00:00Z', 1, 1, 3600, 0, 0, 0, 3600, 1);
         insert into gpu_hourly values ('2026-09-01 00:00Z', 1, 3600);
         insert into invoice (team_id, period, status, currency, total, number_year, number_seq, issued_at)
             values ('nlp', '2026-09-01', 'issued', 'USD', 4, 2026, 1, now());
         insert into invoice (team_id, period, currency, total)
             values ('unattributed', '2026-09-01', 'USD', 1);",
    )
    .execute(&pool)
    .await
    .unwrap();
    apply_migrations(&pool, 7..=7).await;
    let frozen: Option<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("select frozen_at from book where period = '2026-09-01'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(frozen.is_some(), "September is frozen as it stood");
    let held: Decimal = sqlx::query_scalar(
        "select sum(held_seconds) from book_slice_day where period = '2026-09-01'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(held, Decimal::from(3600));
    let drafts: i64 = sqlx::query_scalar(
        "select count(*) from invoice where team_id = 'unattributed' and status = 'draft'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(drafts, 0);
    // Late data for it changes nothing of its books.
    sqlx::raw_sql(
        "insert into usage_hourly values ('2026-09-02 00:00Z', 1, 1, 3600, 0, 0, 0, 3600, 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let again: Decimal =
        sqlx::query_scalar("select sum(held_seconds) from period_slice_day('2026-09-01', true)")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(again, Decimal::from(3600));
    // The migrations since sum the books kept per slice (0018): the month is priced as issued,
    // not as the rollups hold it now.
    apply_migrations(&pool, 8..=i64::MAX).await;
    let priced: Decimal = sqlx::query_scalar(
        "select sum(held_seconds) from period_slice_sums('2026-09-01', true) where team_id = 'nlp'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(priced, Decimal::from(3600));
    // ... and its days are read as they were kept (0020 gathers them per slice).
    let days: Decimal = sqlx::query_scalar(
        "select sum(held_seconds) from period_slice_day('2026-09-01', true) where team_id = 'nlp'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(days, Decimal::from(3600));
    let now: Decimal = sqlx::query_scalar(
        "select sum(held_seconds) from period_slice_sums('2026-09-01', false) where team_id = 'nlp'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(now, Decimal::from(7200), "the late hour is in the rollups");
}

/// The database itself keeps an issued month's books: no statement may add, change or remove a
/// row of them, however many rows it touches, while a draft month's books are rewritten freely.
#[tokio::test]
async fn no_statement_changes_an_issued_months_books() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 2).await;
    run(&app, "2026-09").await;
    // While drafts only: a re-run replaces the books.
    let rows = app
        .count("select count(*) from book_slice where period = '2026-09-01'")
        .await;
    assert!(rows > 0);
    run(&app, "2026-09").await;
    assert_eq!(
        app.count("select count(*) from book_slice where period = '2026-09-01'")
            .await,
        rows
    );
    // No row without its month's books.
    let e = sqlx::query(
        "insert into book_slice
         select '2026-08-01', team_id, team_name, cost_center, model, kind, profile, rate_card_id,
                slice_id, slice_uuid, node, compute_share, memory_share, memory_reserved_bytes,
                windows, first_day, held_seconds, known_seconds, active_seconds,
                memory_byte_seconds, days, day_windows, day_held, day_known, day_active, day_memory
         from book_slice where period = '2026-09-01'",
    )
    .execute(&app.pool)
    .await
    .expect_err("a row of a month without books")
    .to_string();
    assert!(
        e.contains("names period 2026-08-01, which has no books"),
        "{e}"
    );
    let r = issue_all(&app, "2026-09").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    for sql in [
        "update book_slice set held_seconds = 0 where period = '2026-09-01'",
        "update book_slice set day_held = array_fill(0::numeric, array[cardinality(days)])
         where period = '2026-09-01'",
        "delete from book_slice where period = '2026-09-01'",
        "insert into book_slice select * from book_slice where period = '2026-09-01'",
        "update book_model_day set present_seconds = 1 where period = '2026-09-01'",
        "delete from book_model_day where period = '2026-09-01'",
        "delete from book where period = '2026-09-01'",
    ] {
        let e = sqlx::query(sql)
            .execute(&app.pool)
            .await
            .expect_err(sql)
            .to_string();
        assert!(
            e.contains("the books of 2026-09 are issued and cannot be changed"),
            "{sql}: {e}"
        );
    }
    assert_eq!(
        app.count("select count(*) from book_slice where period = '2026-09-01'")
            .await,
        rows
    );
}
