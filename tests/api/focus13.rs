//! FOCUS 1.3 and 1.2 exports under the FinOps Foundation's validator (issue 38): an open, a closed
//! and an issued month (an issued month with a correction billed later, and with a credit note),
//! whole fleet and one team's, with no applicability criteria declared and with every one the data
//! honours. Each cost column is its unit price times the quantity, exactly; the platform's rows
//! are priced; 1.3's `ContractApplied` is there (null).

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::StatusCode;
use chrono::{Datelike, Utc};
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::collector::Cadence;
use slicemeter::domain::access::Role;
use slicemeter::exports::focus::{FOCUS12_CRITERIA, FOCUS13_CRITERIA};

use crate::billing::{dec, rate_card, run};
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

/// Every `AllocatedRatio` of a whole export, summed per origin charge: a card's day under a rate
/// card version (the element's or the details' `x_OriginResourceId`, the row's day and version),
/// or a version's idle capacity spread to teams (`x_OriginRateCardVersion`). Written decimals,
/// read exactly.
fn ratios_per_origin(csv: &Csv) -> BTreeMap<String, Decimal> {
    let (details, start, version) = (
        csv.col("AllocatedMethodDetails"),
        csv.col("ChargePeriodStart"),
        csv.col("x_RateCardVersion"),
    );
    let mut sums: BTreeMap<String, Decimal> = BTreeMap::new();
    for r in csv.rows.iter().filter(|r| !r[details].is_empty()) {
        let v: Value = serde_json::from_str(&r[details]).unwrap();
        for e in v["Elements"].as_array().unwrap() {
            let origin = match (
                e.get("x_OriginResourceId").or(v.get("x_OriginResourceId")),
                v.get("x_OriginRateCardVersion"),
            ) {
                (Some(card), _) => {
                    format!("{} {} v{}", card.as_str().unwrap(), r[start], r[version])
                }
                (None, Some(v)) => format!("idle capacity v{v}"),
                _ => panic!("a split row names no origin: {r:?}"),
            };
            *sums.entry(origin).or_default() += d(&e["AllocatedRatio"].to_string());
        }
    }
    sums
}

/// Each origin's ratios sum to exactly 1.
fn split_whole(csv: &Csv) {
    let sums = ratios_per_origin(csv);
    assert!(!sums.is_empty());
    for (origin, sum) in &sums {
        assert_eq!(*sum, Decimal::ONE, "{origin}");
    }
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
        split_whole(&csv);
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
    split_whole(&csv);
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
    split_whole(&validated(&app, &app.admin, &period).await);
    let lead = app
        .token(Role::TeamLead, Some(&fleet.teams[0].id), None)
        .await;
    validated(&app, &lead, &period).await;
}

/// The `Elements` of a row's `AllocatedMethodDetails`: (component, ratio, GPU-hours).
fn elements(csv: &Csv, r: &[String]) -> (Value, Vec<(String, Decimal, Decimal)>) {
    let v: Value = serde_json::from_str(&r[csv.col("AllocatedMethodDetails")]).unwrap();
    let e = v["Elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["UsageUnit"], "GPU-Hours");
            (
                e["x_Component"].as_str().unwrap().to_owned(),
                d(&e["AllocatedRatio"].to_string()),
                d(&e["UsageQuantity"].to_string()),
            )
        })
        .collect();
    (v, e)
}

/// The worked example's H100 for one hour at 4.00 USD: team nlp holds the 3g.40gb, team search
/// one 1g.10gb, the other 1g.10gb is free. By hand, with weights 0.5/0.5: the 3g.40gb takes
/// 0.5 x 3/7 = 3/14 (0.2142857142...) for compute and 0.5 x 4/8 = 1/4 for memory, 13/28 in all;
/// the 1g.10gb 0.5 x 1/7 = 1/14 (0.0714285714...) and 0.5 x 1/8 = 1/16, 15/112 in all; what is
/// left, 45/112 (0.4017857142...), is unallocated. Written cut to nine places, the unallocated
/// part taking what the cuts left: 0.214285714 + 0.25 + 0.071428571 + 0.0625 + 0.401785715 = 1.
/// Issued, the month's 1.3 export keeps its bytes when a later hour arrives late.
#[tokio::test]
async fn a_card_hour_split_between_two_teams_has_the_hand_computed_ratios_and_keeps_them_once_issued()
 {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    app.put_team("search", &["search"]).await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    let hour = |h: i64| {
        let s = chrono::DateTime::parse_from_rfc3339("2026-09-01T00:00:00Z").unwrap()
            + chrono::Duration::hours(h);
        (
            s.to_rfc3339(),
            (s + chrono::Duration::hours(1)).to_rfc3339(),
        )
    };
    let (s, e) = hour(0);
    let b = batch(
        &s,
        &e,
        vec![
            window(MIG_3G, &s, &e, "nlp", "trainer-0", 3600.0),
            window(MIG_1G_A, &s, &e, "search", "ranker-0", 3600.0),
        ],
    );
    assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);

    let text = export(&app, &app.admin, "2026-09", "1.3").await;
    focus_validate(Validator::V1_3, &text, Some(&FOCUS13_CRITERIA.join(",")));
    let csv = Csv::parse(&text);
    let (resource, meter) = (csv.col("AllocatedResourceId"), csv.col("SkuMeter"));
    let row = |id: &str| {
        csv.rows
            .iter()
            .find(|r| r[resource] == id)
            .unwrap_or_else(|| panic!("no row of {id}: {:?}", csv.rows))
    };
    let hand = |c: &str, m: &str, cq: &str, mq: &str| {
        vec![
            ("Compute".to_owned(), d(c), d(cq)),
            ("Memory".to_owned(), d(m), d(mq)),
        ]
    };
    // The 3g.40gb: 3/14 and 1/4 of the card-hour, 0.214286 and 0.25 GPU-hours.
    let (v, nlp) = elements(&csv, row(MIG_3G));
    assert_eq!(nlp, hand("0.214285714", "0.25", "0.214286", "0.25"));
    assert_eq!(v["x_OriginResourceId"], H100);
    assert_eq!(d(&v["x_OriginQuantity"].to_string()), d("1"));
    assert_eq!(d(&v["x_OriginListCost"].to_string()), d("4"));
    assert_eq!(row(MIG_3G)[csv.col("SubAccountId")], "nlp");
    // 13/28 of 4.00 is 1.857142...: 1.86.
    assert_eq!(row(MIG_3G)[csv.col("BilledCost")], "1.86");
    // The 1g.10gb: 1/14 and 1/16.
    let (v, search) = elements(&csv, row(MIG_1G_A));
    assert_eq!(search, hand("0.071428571", "0.0625", "0.071429", "0.0625"));
    assert_eq!(v["x_OriginResourceId"], H100);
    // Each row's ratio is its share of the card-hour, to within the cut of its two elements.
    for (elements, share) in [(&nlp, (13, 28)), (&search, (15, 112))] {
        let total: Decimal = elements.iter().map(|e| e.1).sum();
        let exact = Decimal::from(share.0) / Decimal::from(share.1);
        assert!(
            total <= exact && exact - total < d("0.000000002"),
            "{total}"
        );
    }
    // The unallocated portion: the platform's row, no allocated resource, one element of the card.
    let platform: Vec<&Vec<String>> = csv
        .rows
        .iter()
        .filter(|r| r[meter] == "Unallocated capacity")
        .collect();
    assert_eq!(platform.len(), 1);
    assert_eq!(platform[0][resource], "");
    let (v, rest) = elements(&csv, platform[0]);
    assert_eq!(
        rest,
        vec![("Unallocated".to_owned(), d("0.401785715"), d("0.401786"))]
    );
    assert_eq!(v["Elements"][0]["x_OriginResourceId"], H100);
    // 45/112 of 4.00 is 1.607142...: 1.61.
    assert_eq!(platform[0][csv.col("BilledCost")], "1.61");
    // One origin, the card's hour, whose ratios sum to exactly 1.
    let origins = ratios_per_origin(&csv);
    assert_eq!(origins.len(), 1, "{origins:?}");
    let (origin, sum) = origins.iter().next().unwrap();
    assert!(
        origin.starts_with(&format!("{H100} 2026-09-01T00:00:00Z v")),
        "{origin}"
    );
    assert_eq!(*sum, Decimal::ONE);
    // A team lead's export holds their row, with the same ratios.
    let lead = app.token(Role::TeamLead, Some("search"), None).await;
    let own = Csv::parse(&export(&app, &lead, "2026-09", "1.3").await);
    assert_eq!(own.rows.len(), 1);
    assert_eq!(elements(&own, &own.rows[0]).1, search);

    // Issued, then an hour of the other 1g.10gb arrives late: the export keeps its bytes (the
    // split is read from the books), and the card's two hours are split live in no export of it.
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
    let frozen = export(&app, &app.admin, "2026-09", "1.3").await;
    let (s, e) = hour(1);
    let late = batch(
        &s,
        &e,
        vec![window(MIG_1G_B, &s, &e, "search", "ranker-1", 3600.0)],
    );
    assert_eq!(app.ingest(&app.admin, &late).await.status, StatusCode::OK);
    assert_eq!(export(&app, &app.admin, "2026-09", "1.3").await, frozen);
    split_whole(&Csv::parse(&frozen));
}
