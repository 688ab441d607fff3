//! FOCUS 1.3 and 1.2 exports under the FinOps Foundation's validator (issue 38): an open, a closed
//! and an issued month (an issued month with a correction billed later, and with a credit note),
//! whole fleet and one team's, with no applicability criteria declared and with every one the data
//! honours. Each cost column is its unit price times the quantity, exactly; the platform's rows
//! are priced; 1.3's `ContractApplied` is there (null).

use std::time::Duration;

use axum::http::StatusCode;
use chrono::{Datelike, Utc};
use rust_decimal::Decimal;
use slicemeter::collector::Cadence;
use slicemeter::domain::access::Role;
use slicemeter::exports::focus::{FOCUS12_CRITERIA, FOCUS13_CRITERIA};

use crate::billing::{dec, rate_card};
use crate::exports::{Csv, Validator, focus_validate, simulated_month};
use crate::support::*;

/// `period`'s export in `version` as `token` gets it.
async fn export(app: &TestApp, token: &str, period: &str, version: &str) -> String {
    let r = app
        .get(
            Some(token),
            &format!("/v1/exports/focus?period={period}&version={version}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    r.body.as_str().unwrap().to_owned()
}

fn d(s: &str) -> Decimal {
    s.parse()
        .unwrap_or_else(|e| panic!("{s:?} is not a decimal: {e}"))
}

/// What a finance tool checks by hand: each cost is its unit price times the quantity, to the
/// last digit, and a row with a price id has its prices.
fn priced_exactly(csv: &Csv) {
    let (q, id) = (csv.col("PricingQuantity"), csv.col("SkuPriceId"));
    for (cost, price) in [
        ("ListCost", "ListUnitPrice"),
        ("ContractedCost", "ContractedUnitPrice"),
    ] {
        let (c, p) = (csv.col(cost), csv.col(price));
        for r in &csv.rows {
            if !r[id].is_empty() {
                assert!(!r[p].is_empty(), "{price} missing: {r:?}");
                assert!(!r[q].is_empty(), "PricingQuantity missing: {r:?}");
            }
            if !r[p].is_empty() && !r[q].is_empty() {
                assert_eq!(d(&r[c]), d(&r[p]) * d(&r[q]), "{cost}: {r:?}");
            }
        }
    }
}

/// Both versions of `period`'s export as `token` gets it pass their validator with no criteria
/// declared and with every criterion the export honours; the 1.3 one, parsed, is returned.
async fn validated(app: &TestApp, token: &str, period: &str) -> Csv {
    let v13 = export(app, token, period, "1.3").await;
    focus_validate(Validator::V1_3, &v13, None);
    focus_validate(Validator::V1_3, &v13, Some(&FOCUS13_CRITERIA.join(",")));
    let v12 = export(app, token, period, "1.2").await;
    focus_validate(Validator::V1_2, &v12, None);
    focus_validate(Validator::V1_2, &v12, Some(&FOCUS12_CRITERIA.join(",")));
    priced_exactly(&Csv::parse(&v12));
    let csv = Csv::parse(&v13);
    priced_exactly(&csv);
    let applied = csv.col("ContractApplied");
    assert!(csv.rows.iter().all(|r| r[applied].is_empty()));
    csv
}

/// Each team's rows add up to its invoice of the month (corrections included): the live one, or
/// the one a credit note voided, whose charges wait to be billed again.
async fn sums_to_the_invoices(app: &TestApp, csv: &Csv, period: &str) -> Vec<String> {
    let invoices = app
        .get(Some(&app.admin), &format!("/v1/invoices?period={period}"))
        .await;
    let sub = csv.col("SubAccountId");
    let mut totals: std::collections::BTreeMap<String, Decimal> = Default::default();
    for i in invoices
        .body
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "invoice")
    {
        *totals
            .entry(i["team"].as_str().unwrap().to_owned())
            .or_default() += dec(&i["total"]);
    }
    for (team, total) in &totals {
        assert_eq!(
            csv.sum("BilledCost", |r| &r[sub] == team),
            *total,
            "{period} {team}"
        );
    }
    totals.into_keys().collect()
}

#[tokio::test]
async fn a_closed_month_and_an_issued_one_corrected_later_pass_both_validators_whole_and_per_team()
{
    let app = TestApp::spawn().await;
    // August issued, its last day's late data billed as corrections on September's drafts.
    simulated_month(&app).await;
    for period in ["2026-08", "2026-09"] {
        let csv = validated(&app, &app.admin, period).await;
        let teams = sums_to_the_invoices(&app, &csv, period).await;
        let lead = app.token(Role::TeamLead, Some(&teams[0]), None).await;
        let own = validated(&app, &lead, period).await;
        let sub = own.col("SubAccountId");
        assert!(!own.rows.is_empty());
        assert!(own.rows.iter().all(|r| r[sub] == teams[0]), "{period}");
    }
    // An issued month's export is read from what was issued: the same bytes every time.
    let first = export(&app, &app.admin, "2026-08", "1.3").await;
    assert_eq!(export(&app, &app.admin, "2026-08", "1.3").await, first);
}

#[tokio::test]
async fn an_issued_month_with_a_credit_note_passes_both_validators_whole_and_per_team() {
    let app = TestApp::spawn().await;
    simulated_month(&app).await;
    let invoices = app
        .get(Some(&app.admin), "/v1/invoices?period=2026-08")
        .await;
    let first = &invoices.body.as_array().unwrap()[0];
    let team = first["team"].as_str().unwrap().to_owned();
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            &format!("/v1/invoices/{}/credit", first["id"]),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let csv = validated(&app, &app.admin, "2026-08").await;
    sums_to_the_invoices(&app, &csv, "2026-08").await;
    let lead = app.token(Role::TeamLead, Some(&team), None).await;
    validated(&app, &lead, "2026-08").await;
}

#[tokio::test]
async fn an_open_month_passes_both_validators_whole_and_per_team() {
    let app = TestApp::spawn().await;
    let now = Utc::now();
    let start = now
        .date_naive()
        .with_day(1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let hours = ((now - start).num_hours() - 1).max(1);
    rate_card(
        &app,
        &(start - chrono::Duration::days(1)).to_rfc3339(),
        "4.00",
    )
    .await;
    let cadence = Cadence {
        sample_interval: Duration::from_secs(300),
        window: Duration::from_secs(3600),
        batch_period: Duration::from_secs(3600),
    };
    let fleet = crate::reports::simulated_at(&app, 5, 4, &start.to_rfc3339(), hours, cadence).await;
    let period = start.format("%Y-%m").to_string();
    validated(&app, &app.admin, &period).await;
    let lead = app
        .token(Role::TeamLead, Some(&fleet.teams[0].id), None)
        .await;
    validated(&app, &lead, &period).await;
}
