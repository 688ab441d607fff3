//! Figures whose exact amount is a half cent, through ingest, the rollups and an invoice run: they
//! round half to even (DESIGN.md), as an auditor recomputing them by hand does (issue 38). A share
//! of 1/7 has no finite decimal; carried as one, it landed a hair above the midpoint and billed the
//! other cent.

use axum::http::StatusCode;
use serde_json::json;

use crate::billing::{dec, draft_of, issue, run};
use crate::exports::Csv;
use crate::support::*;

/// A 1g MIG slice (a seventh of the H100's compute) held 2 h by `search` on 1 September 2026, the
/// GPU present those 2 h, under a card that weighs compute only: 205.03 an hour, MIG at 0.25.
async fn two_sevenths_of_a_gpu_hour(app: &TestApp) {
    app.put_team("search", &["search"]).await;
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/rate-cards",
            &json!({"effective_from": "2026-09-01T00:00:00Z", "currency": "USD",
                    "default_hourly_cost": "3.00", "weights": {"compute": "1", "memory": "0"},
                    "isolation_factors": {"mig": "0.25"},
                    "prices": {"NVIDIA H100 80GB HBM3": "205.03"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let windows = (0..2)
        .map(|h| {
            window(
                MIG_1G_A,
                &format!("2026-09-01T0{h}:00:00Z"),
                &format!("2026-09-01T0{}:00:00Z", h + 1),
                "search",
                "ranker-0",
                3600.0,
            )
        })
        .collect();
    let b = batch("2026-09-01T00:00:00Z", "2026-09-01T02:00:00Z", windows);
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

#[tokio::test]
async fn an_invoice_line_of_exactly_14_645_is_billed_14_64() {
    let app = TestApp::spawn().await;
    two_sevenths_of_a_gpu_hour(&app).await;
    // 2 h x 1/7 x 205.03 x 0.25 = 14.645 exactly: the 4 is even.
    let drafts = run(&app, "2026-09").await;
    let search = draft_of(&drafts, "search");
    assert_eq!(dec(&search["lines"][0]["amount"]), dec(&json!("14.64")));
    assert_eq!(dec(&search["total"]), dec(&json!("14.64")));
}

#[tokio::test]
async fn the_month_s_figures_round_once_half_to_even() {
    let app = TestApp::spawn().await;
    two_sevenths_of_a_gpu_hour(&app).await;
    run(&app, "2026-09").await;
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(report.status, StatusCode::OK, "{report:?}");
    let c = &report.body["conservation"];
    // 2 h of the GPU at 205.03; 2/7 of it held (58.58), 3/4 of that discounted (43.935).
    assert_eq!(dec(&c["fleet_cost"]), dec(&json!("410.06")));
    assert_eq!(dec(&c["team_charges"]), dec(&json!("14.64")));
    assert_eq!(dec(&c["sharing_discount"]), dec(&json!("43.94")));
    assert_eq!(dec(&c["unallocated"]), dec(&json!("351.48")));
    assert_eq!(dec(&c["rounding_residual"]), dec(&json!("0.00")));
}

#[tokio::test]
async fn unallocated_capacity_of_exactly_0_095_is_0_10() {
    let app = TestApp::spawn().await;
    app.put_team("search", &["search"]).await;
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/rate-cards",
            &json!({"effective_from": "2026-09-01T00:00:00Z", "currency": "USD",
                    "default_hourly_cost": "3.00", "weights": {"compute": "1", "memory": "0"},
                    "prices": {"NVIDIA H100 80GB HBM3": "0.035"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    // The GPU present 3 h, a seventh of it held 2 h: 0.105 - 0.01 = 0.095 unallocated exactly.
    let windows = (0..2)
        .map(|h| {
            window(
                MIG_1G_A,
                &format!("2026-09-01T0{h}:00:00Z"),
                &format!("2026-09-01T0{}:00:00Z", h + 1),
                "search",
                "ranker-0",
                3600.0,
            )
        })
        .collect();
    let b = batch("2026-09-01T00:00:00Z", "2026-09-01T03:00:00Z", windows);
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    run(&app, "2026-09").await;
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    let c = &report.body["conservation"];
    assert_eq!(dec(&c["fleet_cost"]), dec(&json!("0.10")));
    assert_eq!(dec(&c["team_charges"]), dec(&json!("0.01")));
    assert_eq!(dec(&c["unallocated"]), dec(&json!("0.10")));
    assert_eq!(dec(&c["rounding_residual"]), dec(&json!("-0.01")));
}

/// The line of exactly 14.645 as the exports and the OpenCost API show it: 14.64 everywhere a
/// finance tool reads it, never 14.65.
#[tokio::test]
async fn the_exports_and_the_opencost_api_show_the_half_cent_line_as_14_64() {
    let app = TestApp::spawn().await;
    two_sevenths_of_a_gpu_hour(&app).await;
    let drafts = run(&app, "2026-09").await;
    issue(&app, &draft_of(&drafts, "search")["id"]).await;

    for version in ["1.2", "1.3"] {
        let r = app
            .get(
                Some(&app.admin),
                &format!("/v1/exports/focus?period=2026-09&version={version}"),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        let csv = Csv::parse(r.body.as_str().unwrap());
        let team = csv.col("SubAccountId");
        let search: Vec<_> = csv.rows.iter().filter(|r| r[team] == "search").collect();
        assert_eq!(search.len(), 1, "one slice-day: {:?}", csv.rows);
        assert_eq!(search[0][csv.col("BilledCost")], "14.64", "FOCUS {version}");
    }

    let erp = app
        .get(Some(&app.admin), "/v1/exports/erp?period=2026-09")
        .await;
    assert_eq!(erp.status, StatusCode::OK, "{erp:?}");
    let csv = Csv::parse(erp.body.as_str().unwrap());
    let debits: Vec<_> = csv
        .rows
        .iter()
        .map(|r| r[csv.col("debit")].as_str())
        .filter(|d| !d.is_empty())
        .collect();
    assert_eq!(debits, ["14.64"], "{:?}", csv.rows);

    let r = app
        .get(
            Some(&app.admin),
            "/allocation?window=2026-09-01T00:00:00Z,2026-09-02T00:00:00Z&aggregate=namespace",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let cost = &r.body["data"][0]["search"]["totalCost"];
    let cost = cost
        .as_str()
        .map_or_else(|| cost.to_string(), str::to_owned);
    assert_eq!(cost, "14.64", "{r:?}");
}

/// `search` holds the 1g slice `hours` hours from `start`, the GPU present as long.
async fn a_seventh_held(app: &TestApp, start: chrono::DateTime<chrono::Utc>, hours: i64) {
    let at = |h: i64| (start + chrono::Duration::hours(h)).to_rfc3339();
    let windows = (0..hours)
        .map(|h| window(MIG_1G_A, &at(h), &at(h + 1), "search", "ranker-0", 3600.0))
        .collect();
    let r = app
        .ingest(&app.admin, &batch(&at(0), &at(hours), windows))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

/// An `auto` budget averages the team's closed months: 21.97 and 14.64 average 18.305 exactly,
/// which is 18.30 (the 0 is even), not 18.31.
#[tokio::test]
async fn an_auto_budget_averaging_a_half_cent_is_the_even_cent() {
    let app = TestApp::spawn().await;
    app.put_team("search", &["search"]).await;
    let now = slicemeter::domain::time::Month::of(chrono::Utc::now());
    let (before_last, last) = (now.minus(2), now.minus(1));
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/rate-cards",
            &json!({"effective_from": before_last.start().to_rfc3339(), "currency": "USD",
                    "default_hourly_cost": "3.00", "weights": {"compute": "1", "memory": "0"},
                    "isolation_factors": {"mig": "0.25"},
                    "prices": {"NVIDIA H100 80GB HBM3": "205.03"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    // 3 h x 1/7 x 205.03 x 0.25 = 21.9675: 21.97; 2 h: 14.645, 14.64.
    a_seventh_held(&app, before_last.start(), 3).await;
    a_seventh_held(&app, last.start(), 2).await;
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/budgets",
            &json!({"team": "search", "amount": "auto", "auto_months": 2, "currency": "USD",
                    "thresholds": [{"kind": "forecast", "percent": 100}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(
        dec(&r.body["current"]["budget"]),
        dec(&json!("18.30")),
        "{r:?}"
    );
}
