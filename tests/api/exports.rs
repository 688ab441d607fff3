//! FOCUS and ERP exports, reconciled against the monthly report and the invoices.
//!
//! The file stays whole: each export is reconciled against the same report and invoices, with
//! shared helpers.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use axum::http::StatusCode;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::collector::Cadence;
use slicemeter::domain::access::Role;
use slicemeter::sim::SimFleet;

use crate::billing::{d, dec, draft_of, issue, rate_card, run, worked_example};
use crate::support::*;

pub struct Csv {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Csv {
    pub fn parse(text: &str) -> Csv {
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let headers = r.headers().unwrap().iter().map(str::to_owned).collect();
        let rows = r
            .records()
            .map(|rec| rec.unwrap().iter().map(str::to_owned).collect())
            .collect();
        Csv { headers, rows }
    }

    pub fn col(&self, name: &str) -> usize {
        self.headers
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    }

    pub fn sum(&self, name: &str, filter: impl Fn(&Vec<String>) -> bool) -> Decimal {
        let c = self.col(name);
        self.rows
            .iter()
            .filter(|r| filter(r))
            .map(|r| d(&r[c]))
            .sum()
    }
}

async fn focus(app: &TestApp, token: &str, period: &str) -> (Reply, Csv) {
    let r = app
        .get(Some(token), &format!("/v1/exports/focus?period={period}"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let csv = Csv::parse(r.body.as_str().unwrap());
    (r, csv)
}

#[tokio::test]
async fn the_focus_export_sums_to_the_fleet_cost_and_each_team_to_its_invoice() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 30).await;
    let drafts = run(&app, "2026-09").await;
    issue(&app, &draft_of(&drafts, "nlp")["id"]).await;

    let (reply, csv) = focus(&app, &app.admin, "2026-09").await;
    let disposition = reply.headers["content-disposition"].to_str().unwrap();
    assert!(
        disposition.starts_with("attachment; filename=\"slicemeter-focus-2026-09-generated-"),
        "{disposition}"
    );
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    let fleet = dec(&report.body["conservation"]["fleet_cost"]);
    assert_eq!(fleet, d("2880.00"));
    assert_eq!(csv.sum("BilledCost", |_| true), fleet);
    let sub = csv.col("SubAccountId");
    for team in ["nlp", "search", "vision"] {
        let invoice = dec(&draft_of(&drafts, team)["total"]);
        assert_eq!(csv.sum("BilledCost", |r| r[sub] == team), invoice, "{team}");
    }
    // One row per slice and day, then the platform's day by day, then the rounding residual.
    let category = csv.col("ChargeCategory");
    assert_eq!(
        csv.sum("BilledCost", |r| r[sub] == "platform"
            && r[category] == "Usage"),
        d("771.43"),
        "unallocated"
    );
    assert_eq!(
        csv.sum("BilledCost", |r| r[category] == "Adjustment"),
        d("0.01"),
        "residual"
    );
    assert_eq!(csv.rows.iter().filter(|r| r[sub] == "nlp").count(), 30);
    assert_eq!(
        csv.rows.iter().filter(|r| r[sub] == "platform").count(),
        30 + 1
    );
    assert_eq!(
        csv.rows
            .iter()
            .filter(|r| r[category] == "Adjustment")
            .count(),
        1
    );
    let nlp_row = csv.rows.iter().find(|r| r[sub] == "nlp").unwrap();
    let get = |name: &str| nlp_row[csv.col(name)].clone();
    assert_eq!(get("ChargePeriodStart"), "2026-09-01T00:00:00Z");
    assert_eq!(get("ChargePeriodEnd"), "2026-09-02T00:00:00Z");
    assert_eq!(get("BillingPeriodStart"), "2026-09-01T00:00:00Z");
    assert_eq!(get("BillingPeriodEnd"), "2026-10-01T00:00:00Z");
    assert_eq!(get("ServiceCategory"), "AI and Machine Learning");
    assert_eq!(get("BillingCurrency"), "USD");
    assert_eq!(get("ResourceId"), MIG_3G);
    assert_eq!(get("ConsumedQuantity"), "24.000000");
    assert_eq!(get("ConsumedUnit"), "Slice-Hours");
    assert_eq!(get("PricingQuantity"), "11.142857");
    assert_eq!(get("SkuId"), "NVIDIA H100 80GB HBM3/mig/3g.40gb");
    assert_eq!(get("x_MigProfile"), "3g.40gb");
    assert_eq!(get("x_PhysicalShare"), "0.464286");
    assert_eq!(get("x_IsolationFactor"), "1.00");
    assert_eq!(get("x_RateCardVersion"), "1");
    assert!(get("x_InvoiceNumber").starts_with("SM-"));
    let tags: serde_json::Value = serde_json::from_str(&get("Tags")).unwrap();
    assert_eq!(tags["slicemeter/team"], "nlp");
    // The slice as dcgm-exporter labels its series, under dcgm-exporter's names.
    assert_eq!(tags["UUID"], H100);
    assert_eq!(tags["Hostname"], "gpu-node-01");
    assert_eq!(tags["modelName"], "NVIDIA H100 80GB HBM3");
    assert_eq!(tags["GPU_I_PROFILE"], "3g.40gb");
    assert_eq!(tags["GPU_I_ID"], "2");
    assert_eq!(get("ChargeClass"), "");
}

/// A month of a simulated fleet with every slice kind, two rate cards (the second spreads idle
/// capacity), and a correction: every FOCUS row type.
pub async fn simulated_month(app: &TestApp) {
    let fleet = SimFleet::generate(7, 24);
    for t in &fleet.teams {
        let ns: Vec<&str> = t.namespaces.iter().map(String::as_str).collect();
        app.put_team(&t.id, &ns).await;
    }
    rate_card(app, "2026-08-01T00:00:00Z", "4.00").await;
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/rate-cards",
            &json!({"effective_from": "2026-09-16T00:00:00Z", "currency": "USD", "default_hourly_cost": "3.10",
                    "idle_policy": "spread", "prices": {"NVIDIA H100 80GB HBM3": "4.40", "NVIDIA H200": "5.50"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let cadence = Cadence {
        sample_interval: Duration::from_secs(300),
        window: Duration::from_secs(3600),
        batch_period: Duration::from_secs(86_400),
    };
    let mut batches = Vec::new();
    let from: chrono::DateTime<chrono::Utc> = "2026-08-31T00:00:00Z".parse().unwrap();
    slicemeter::sim::generate::generate(
        &fleet,
        from,
        from + chrono::Duration::days(31),
        cadence,
        |day| {
            batches.extend(day);
            true
        },
    )
    .unwrap();
    // August's last day first, invoiced; it comes back corrected in September.
    let (august, september): (Vec<_>, Vec<_>) = batches.into_iter().partition(|b| {
        b.period.start
            < "2026-09-01T00:00:00Z"
                .parse::<chrono::DateTime<chrono::Utc>>()
                .unwrap()
    });
    let (early, late): (Vec<_>, Vec<_>) = august.into_iter().partition(|b| b.node != "gpu-node-01");
    for b in &early {
        assert_eq!(
            app.ingest(&app.admin, &serde_json::to_value(b).unwrap())
                .await
                .status,
            StatusCode::OK
        );
    }
    let drafts = run(app, "2026-08").await;
    for i in drafts.body["drafts"].as_array().unwrap() {
        issue(app, &i["id"]).await;
    }
    for b in late.iter().chain(&september) {
        assert_eq!(
            app.ingest(&app.admin, &serde_json::to_value(b).unwrap())
                .await
                .status,
            StatusCode::OK
        );
    }
    run(app, "2026-09").await;
}

#[tokio::test]
async fn a_simulated_month_passes_the_finops_foundation_focus_validator() {
    let app = TestApp::spawn().await;
    simulated_month(&app).await;
    let (reply, csv) = focus(&app, &app.admin, "2026-09").await;
    let class = csv.col("ChargeClass");
    assert!(
        csv.rows.iter().any(|r| r[class] == "Correction"),
        "the month carries corrections"
    );
    let kinds: std::collections::BTreeSet<&str> = csv
        .rows
        .iter()
        .map(|r| r[csv.col("x_SliceKind")].as_str())
        .collect();
    assert!(kinds.len() >= 5, "{kinds:?}");
    // Without the corrections (August's), the rows sum to September's fleet cost.
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    assert_eq!(
        csv.sum("BilledCost", |r| r[class] != "Correction"),
        dec(&report.body["conservation"]["fleet_cost"])
    );
    // Team rows (corrections included) equal the September invoices.
    let invoices = app
        .get(Some(&app.admin), "/v1/invoices?period=2026-09")
        .await;
    let sub = csv.col("SubAccountId");
    for i in invoices.body.as_array().unwrap() {
        let team = i["team"].as_str().unwrap();
        assert_eq!(
            csv.sum("BilledCost", |r| r[sub] == team),
            dec(&i["total"]),
            "{team}"
        );
    }

    // The same month in FOCUS 1.0, for tools that read no later one, passes 1.0's validator ...
    let v10 = app
        .get(
            Some(&app.admin),
            "/v1/exports/focus?period=2026-09&version=1.0",
        )
        .await;
    assert_eq!(v10.status, StatusCode::OK, "{v10:?}");
    let old = Csv::parse(v10.body.as_str().unwrap());
    assert_eq!(old.headers.len(), 50);
    assert!(!old.headers.iter().any(|h| h == "InvoiceId"));
    assert_eq!(
        old.sum("BilledCost", |_| true),
        csv.sum("BilledCost", |_| true)
    );
    focus_validate(Validator::V1_0, v10.body.as_str().unwrap(), None);
    // ... and the default, FOCUS 1.2, 1.2's: with no applicability criteria declared and with every
    // one the export supports.
    let criteria = slicemeter::exports::focus::FOCUS12_CRITERIA.join(",");
    let text = reply.body.as_str().unwrap();
    focus_validate(Validator::V1_2, text, None);
    focus_validate(Validator::V1_2, text, Some(&criteria));
}

#[derive(Clone, Copy)]
pub enum Validator {
    V1_0,
    V1_2,
    V1_3,
}

/// Runs the FinOps Foundation's validator on `csv`. Its wrappers are the project's shared checks
/// beside the repository (`../shared/scripts`); SLICEMETER_FOCUS_VALIDATE names the 1.0 one for a
/// checkout elsewhere, the 1.2 and 1.3 ones (`focus-validate-1.2`, `focus-validate-1.3`) sitting
/// beside it.
pub fn focus_validate(version: Validator, csv: &str, criteria: Option<&str>) {
    let (passed, text) = focus_validator(version, csv, criteria);
    assert!(
        passed,
        "the validator (criteria {criteria:?}) failed:\n{text}"
    );
}

/// Whether the validator passed `csv`, and what it printed.
pub fn focus_validator(version: Validator, csv: &str, criteria: Option<&str>) -> (bool, String) {
    let v10 = std::env::var("SLICEMETER_FOCUS_VALIDATE").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/scripts/focus-validate"
        )
        .to_owned()
    });
    let (script, verdict) = match version {
        Validator::V1_0 => (v10, "focus-validate: all checks passed"),
        Validator::V1_2 => (
            format!("{v10}-1.2"),
            "focus-validate-1.2: all checks passed",
        ),
        Validator::V1_3 => (
            format!("{v10}-1.3"),
            "focus-validate-1.3: all checks passed",
        ),
    };
    let criteria_var = match version {
        Validator::V1_3 => "SLICEMETER_FOCUS13_CRITERIA",
        _ => "SLICEMETER_FOCUS12_CRITERIA",
    };
    assert!(
        std::path::Path::new(&script).exists(),
        "the FinOps Foundation's validator wrapper is expected at {script} (or set SLICEMETER_FOCUS_VALIDATE)"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("focus.csv");
    std::fs::write(&file, csv).unwrap();
    let mut command = std::process::Command::new(&script);
    command.arg(&file);
    match criteria {
        Some(c) => command.env(criteria_var, c),
        None => command.env_remove(criteria_var),
    };
    let out = command.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success() && text.contains(verdict), text)
}

#[tokio::test]
async fn a_thirty_day_month_of_eight_gpus_passes_the_focus_1_2_validator() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    let cadence = Cadence {
        sample_interval: Duration::from_secs(300),
        window: Duration::from_secs(3600),
        batch_period: Duration::from_secs(86_400),
    };
    crate::reports::simulated_at(&app, 11, 8, "2026-09-01T00:00:00Z", 30 * 24, cadence).await;
    // Drafts are working documents, not invoices: no InvoiceId yet.
    let drafts = run(&app, "2026-09").await;
    let (reply, csv) = focus(&app, &app.admin, "2026-09").await;
    let (invoice, sub) = (csv.col("InvoiceId"), csv.col("SubAccountId"));
    assert!(csv.rows.iter().all(|r| r[invoice].is_empty()));
    // The platform's rows are capacity, not resources: no ResourceId and no ResourceType.
    let (id, kind) = (csv.col("ResourceId"), csv.col("ResourceType"));
    assert!(
        csv.rows
            .iter()
            .any(|r| r[sub] == "platform" && r[id].is_empty())
    );
    for r in csv.rows.iter().filter(|r| r[id].is_empty()) {
        assert_eq!(r[kind], "", "{r:?}");
    }
    // What the price is made of, as FOCUS 1.2's SkuPriceDetails JSON object.
    let details: serde_json::Value = serde_json::from_str(
        &csv.rows
            .iter()
            .find(|r| r[csv.col("x_SliceKind")] == "mig")
            .expect("a MIG row")[csv.col("SkuPriceDetails")],
    )
    .unwrap();
    assert_eq!(details["x_SliceKind"], "mig");
    assert!(
        details["x_PhysicalShare"].as_f64().unwrap() > 0.0,
        "{details}"
    );
    assert_eq!(details["x_IsolationFactor"], 1.0);
    let unit = csv.col("PricingUnit");
    assert!(csv.rows.iter().any(|r| r[unit] == "GPU-Hours"));
    let criteria = slicemeter::exports::focus::FOCUS12_CRITERIA.join(",");
    let text = reply.body.as_str().unwrap();
    focus_validate(Validator::V1_2, text, None);
    focus_validate(Validator::V1_2, text, Some(&criteria));

    // Issued, each team's rows carry its invoice's number; the platform's the document that settles
    // the platform's side of the month, the ERP journal's clearing document.
    let mut numbers = BTreeMap::new();
    for i in drafts.body["drafts"].as_array().unwrap() {
        let issued = issue(&app, &i["id"]).await;
        assert_eq!(issued.status, StatusCode::OK, "{issued:?}");
        numbers.insert(
            i["team"].as_str().unwrap().to_owned(),
            issued.body["number"].as_str().unwrap().to_owned(),
        );
    }
    let (reply, csv) = focus(&app, &app.admin, "2026-09").await;
    assert!(csv.rows.iter().any(|r| r[sub] == "platform"));
    for r in &csv.rows {
        match numbers.get(&r[sub]) {
            Some(n) => assert_eq!(&r[invoice], n, "{r:?}"),
            None => assert_eq!(r[invoice], "CLEARING-2026-09", "{r:?}"),
        }
    }
    // Every row on a document: the whole fleet's export passes, and so does a team lead's.
    focus_validate(Validator::V1_2, reply.body.as_str().unwrap(), None);
    focus_validate(
        Validator::V1_2,
        reply.body.as_str().unwrap(),
        Some(&criteria),
    );
    let (team, _) = numbers.iter().next().unwrap();
    let lead = app.token(Role::TeamLead, Some(team), None).await;
    let (own, _) = focus(&app, &lead, "2026-09").await;
    focus_validate(Validator::V1_2, own.body.as_str().unwrap(), Some(&criteria));
}

#[tokio::test]
async fn a_team_leads_focus_export_holds_only_their_rows() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 3).await;
    let lead = app.token(Role::TeamLead, Some("search"), None).await;
    let (_, csv) = focus(&app, &lead, "2026-09").await;
    let sub = csv.col("SubAccountId");
    assert_eq!(csv.rows.len(), 3);
    assert!(csv.rows.iter().all(|r| r[sub] == "search"));
    assert!(
        !csv.rows
            .iter()
            .flatten()
            .any(|v| v.contains("nlp") || v.contains("vision"))
    );
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    assert_eq!(
        app.get(Some(&collector), "/v1/exports/focus?period=2026-09")
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.get(Some(&lead), "/v1/exports/erp?period=2026-09")
            .await
            .status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn names_with_commas_quotes_newlines_and_non_ascii_round_trip() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 1).await;
    let name = "Ads, \"Ranking\"\nÉquipe 東京 🚀";
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/nlp",
            &json!({"display_name": name, "namespaces": ["nlp"], "cost_center": "CC, \"7\"", "gl_account": "6420"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let (_, csv) = focus(&app, &app.admin, "2026-09").await;
    let row = csv
        .rows
        .iter()
        .find(|r| r[csv.col("SubAccountId")] == "nlp")
        .unwrap();
    assert_eq!(row[csv.col("SubAccountName")], name);
    let tags: serde_json::Value = serde_json::from_str(&row[csv.col("Tags")]).unwrap();
    assert_eq!(tags["slicemeter/cost-center"], "CC, \"7\"");

    let drafts = run(&app, "2026-09").await;
    for i in drafts.body["drafts"].as_array().unwrap() {
        issue(&app, &i["id"]).await;
    }
    let erp = app
        .get(Some(&app.admin), "/v1/exports/erp?period=2026-09")
        .await;
    assert_eq!(erp.status, StatusCode::OK, "{erp:?}");
    let csv = Csv::parse(erp.body.as_str().unwrap());
    let nlp = csv
        .rows
        .iter()
        .find(|r| r[csv.col("cost_center")] == "CC, \"7\"")
        .unwrap();
    assert!(nlp[csv.col("description")].contains(name));
}

#[tokio::test]
async fn the_erp_journal_balances_and_matches_the_issued_invoices() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 30).await;
    let drafts = run(&app, "2026-09").await;

    let early = app
        .get(Some(&app.admin), "/v1/exports/erp?period=2026-09")
        .await;
    assert_eq!(early.status, StatusCode::CONFLICT);
    assert!(
        early.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("drafts: nlp, search, vision"),
        "{early:?}"
    );
    let mut numbers = BTreeMap::new();
    for team in ["nlp", "search", "vision"] {
        let issued = issue(&app, &draft_of(&drafts, team)["id"]).await;
        numbers.insert(
            issued.body["number"].as_str().unwrap().to_owned(),
            dec(&issued.body["total"]),
        );
    }
    let r = app
        .get(Some(&app.admin), "/v1/exports/erp?period=2026-09")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let csv = Csv::parse(r.body.as_str().unwrap());
    assert_eq!(
        csv.headers,
        [
            "posting_date",
            "period",
            "document",
            "line",
            "cost_center",
            "gl_account",
            "debit",
            "credit",
            "currency",
            "description"
        ]
    );
    let (debit, credit, doc, cc) = (
        csv.col("debit"),
        csv.col("credit"),
        csv.col("document"),
        csv.col("cost_center"),
    );
    let debits: Decimal = csv
        .rows
        .iter()
        .filter(|r| !r[debit].is_empty())
        .map(|r| d(&r[debit]))
        .sum();
    let credits: Decimal = csv
        .rows
        .iter()
        .filter(|r| !r[credit].is_empty())
        .map(|r| d(&r[credit]))
        .sum();
    assert_eq!(debits, credits, "balanced");
    assert_eq!(debits, d("2108.56"));
    for row in csv.rows.iter().filter(|r| !r[debit].is_empty()) {
        assert_eq!(d(&row[debit]), numbers[&row[doc]], "{row:?}");
        assert_eq!(row[csv.col("posting_date")], "2026-09-30");
    }
    let platform: Vec<_> = csv
        .rows
        .iter()
        .filter(|r| r[cc] == "GPU-PLATFORM")
        .collect();
    assert_eq!(platform.len(), 1);
    assert_eq!(d(&platform[0][credit]), d("2108.56"));

    // An issued month's journal names each team as its invoice did: a cost center changed later
    // changes nothing.
    let before = r.body.clone();
    sqlx::query("update team set cost_center = 'CC-elsewhere' where team_id = 'vision'")
        .execute(&app.pool)
        .await
        .unwrap();
    let again = app
        .get(Some(&app.admin), "/v1/exports/erp?period=2026-09")
        .await;
    assert_eq!(again.body, before);
}

#[tokio::test]
async fn a_team_without_a_cost_center_is_named_and_no_journal_is_exported() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 2).await;
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/vision",
            &json!({"cost_center": null}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
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
    let r = app
        .get(Some(&app.admin), "/v1/exports/erp?period=2026-09")
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(
        r.body["error"]["message"],
        "team \"vision\" has no cost center: set it with PUT /v1/teams/vision before exporting journal lines"
    );
    // Set now, the journal takes it: the invoice had none to keep.
    app.send_json(
        "PUT",
        Some(&app.admin),
        "/v1/teams/vision",
        &json!({"cost_center": "CC-vision"}),
    )
    .await;
    let r = app
        .get(Some(&app.admin), "/v1/exports/erp?period=2026-09")
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(r.body.as_str().unwrap().contains("CC-vision"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_exports_focus_and_the_journal_in_a_layout_of_the_erps_choosing() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 2).await;
    let drafts = run(&app, "2026-09").await;
    for t in ["nlp", "search", "vision"] {
        issue(&app, &draft_of(&drafts, t)["id"]).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| {
        let out = app.cli(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let focus_file = dir.path().join("focus.csv");
    cli(&[
        "export",
        "focus",
        "--period",
        "2026-09",
        "--out",
        focus_file.to_str().unwrap(),
    ]);
    let api = app
        .get(Some(&app.admin), "/v1/exports/focus?period=2026-09")
        .await;
    let file = std::fs::read_to_string(&focus_file).unwrap();
    assert_eq!(
        Csv::parse(&file).rows,
        Csv::parse(api.body.as_str().unwrap()).rows
    );

    let erp_file = dir.path().join("journal.csv");
    cli(&[
        "export",
        "erp",
        "--period",
        "2026-09",
        "--erp-layout",
        "deploy/erp-layout.example.toml",
        "--out",
        erp_file.to_str().unwrap(),
    ]);
    let journal = Csv::parse(&std::fs::read_to_string(&erp_file).unwrap());
    assert_eq!(
        journal.headers,
        [
            "PostingDate",
            "DocumentReference",
            "CostCenter",
            "GLAccount",
            "Amount",
            "Currency",
            "LineText"
        ]
    );
    assert_eq!(journal.sum("Amount", |_| true), Decimal::ZERO);
    assert_eq!(journal.rows.len(), 4);
}

#[tokio::test]
async fn a_client_that_accepts_gzip_gets_the_same_bytes_compressed_and_one_that_does_not_gets_them_plain()
 {
    use axum::body::Body;
    use axum::http::{Request, header};
    use std::io::Read;
    let app = TestApp::spawn().await;
    simulated_month(&app).await;
    let raw = |uri: &str, gzip: bool| {
        let mut req =
            Request::get(uri).header(header::AUTHORIZATION, format!("Bearer {}", app.admin));
        if gzip {
            req = req.header(header::ACCEPT_ENCODING, "gzip");
        }
        let router = app.router.clone();
        let req = req.body(Body::empty()).unwrap();
        async move {
            use tower::ServiceExt;
            let response = router.oneshot(req).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let encoding = response
                .headers()
                .get(header::CONTENT_ENCODING)
                .map(|v| v.to_str().unwrap().to_owned());
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (encoding, bytes)
        }
    };
    for uri in [
        "/v1/exports/focus?period=2026-09",
        "/v1/reports/monthly/2026-09",
    ] {
        let (plain_encoding, plain) = raw(uri, false).await;
        assert_eq!(plain_encoding, None, "{uri}");
        let (encoding, packed) = raw(uri, true).await;
        assert_eq!(encoding.as_deref(), Some("gzip"), "{uri}");
        let mut unpacked = Vec::new();
        flate2::read::GzDecoder::new(&packed[..])
            .read_to_end(&mut unpacked)
            .unwrap();
        // The same bytes, whichever way they travelled.
        assert_eq!(unpacked, plain.to_vec(), "{uri}");
        assert!(
            packed.len() * 3 < plain.len(),
            "{uri}: {} bytes gzip'd of {}",
            packed.len(),
            plain.len()
        );
    }
}

#[tokio::test]
async fn the_focus_export_sends_its_header_before_any_row_is_read() {
    use axum::body::Body;
    use axum::http::Request;
    use futures_util::StreamExt;
    use tower::ServiceExt;

    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 30).await;
    let response = app
        .router
        .clone()
        .oneshot(
            Request::get("/v1/exports/focus?period=2026-09")
                .header("authorization", format!("Bearer {}", app.admin))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let first = body.next().await.unwrap().unwrap();
    let first = std::str::from_utf8(&first).unwrap();
    // The header line alone, as its own chunk: the client sees the export start at once.
    assert_eq!(
        first.trim_end(),
        slicemeter::exports::focus::Version::V1_2
            .columns()
            .join(","),
        "the first chunk is the header alone"
    );
    let mut rest = Vec::new();
    while let Some(chunk) = body.next().await {
        rest.extend_from_slice(&chunk.unwrap());
    }
    let csv = Csv::parse(&format!("{first}{}", String::from_utf8(rest).unwrap()));
    assert_eq!(csv.sum("BilledCost", |_| true), d("2880.00"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_focus_export_sends_its_header_while_the_month_is_still_being_priced() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 30).await;
    let served = app.serve(test_config()).await;
    // Another session holds the day rollups: pricing the month waits until it lets go.
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("lock table usage_daily in access exclusive mode")
        .execute(&mut *holder)
        .await
        .unwrap();
    let wait = Duration::from_secs(10);
    let mut response = tokio::time::timeout(
        wait,
        reqwest::Client::new()
            .get(format!("{}/v1/exports/focus?period=2026-09", served.base))
            .bearer_auth(&app.admin)
            .send(),
    )
    .await
    .expect("no response while the month could not be priced")
    .unwrap();
    assert_eq!(response.status(), 200);
    let header = tokio::time::timeout(wait, response.chunk())
        .await
        .expect("no first byte while the month could not be priced")
        .unwrap()
        .unwrap();
    assert!(
        header.starts_with(b"AvailabilityZone,BilledCost"),
        "{header:?}"
    );
    // The month is being priced, and cannot be until the lock is let go.
    let mut waiting = 0i64;
    for _ in 0..100 {
        waiting = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(waiting > 0, "the month's pricing waits on the lock");
    holder.rollback().await.unwrap();
    let mut body = header.to_vec();
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    let csv = Csv::parse(std::str::from_utf8(&body).unwrap());
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    let fleet = dec(&report.body["conservation"]["fleet_cost"]);
    assert_eq!(fleet, d("2880.00"));
    assert_eq!(csv.sum("BilledCost", |_| true), fleet);
    served.stop().await;
}

#[tokio::test]
async fn a_focus_export_of_hours_no_rate_card_prices_is_refused_before_it_starts() {
    let app = TestApp::spawn().await;
    worked_example(&app, "2026-09-01", 30).await;
    let refused = |r: &Reply| {
        assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
        let message = r.body["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("no rate card is in force") && message.contains("2026-09-01T00:00:00"),
            "{message}"
        );
    };
    refused(
        &app.get(Some(&app.admin), "/v1/exports/focus?period=2026-09")
            .await,
    );
    // A card from the tenth prices the rest of the month, not its first nine days.
    rate_card(&app, "2026-09-10T00:00:00Z", "4.00").await;
    refused(
        &app.get(Some(&app.admin), "/v1/exports/focus?period=2026-09")
            .await,
    );
    // October is priced whole by that card.
    let (_, october) = focus(&app, &app.admin, "2026-10").await;
    assert_eq!(october.rows.len(), 0);
}

/// A month's FOCUS 1.3 export.
async fn focus_1_3(app: &TestApp, period: &str) -> Csv {
    let r = app
        .get(
            Some(&app.admin),
            &format!("/v1/exports/focus?period={period}&version=1.3"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    Csv::parse(r.body.as_str().unwrap())
}

#[tokio::test]
async fn focus_1_3_allocated_rows_sum_to_the_team_charges_and_unallocated_rows_to_the_unallocated_cost()
 {
    let app = TestApp::spawn().await;
    // Two rate cards (the second spreads idle capacity to teams), corrections of August.
    simulated_month(&app).await;
    let csv = focus_1_3(&app, "2026-09").await;
    let report = app
        .get(Some(&app.admin), "/v1/reports/monthly/2026-09")
        .await;
    let c = &report.body["conservation"];
    let (method, resource, kind) = (
        csv.col("AllocatedMethodId"),
        csv.col("AllocatedResourceId"),
        csv.col("SubAccountType"),
    );
    // The teams' allocated rows: their slices' parts and their spread idle capacity.
    assert_eq!(
        csv.sum("BilledCost", |r| r[kind] == "Team"
            && !r[method].is_empty()
            && !r[resource].is_empty()),
        dec(&c["team_charges"])
    );
    // The unallocated portion: the split's rows with no allocated resource.
    let unallocated = |r: &Vec<String>| !r[method].is_empty() && r[resource].is_empty();
    assert!(
        csv.rows.iter().any(unallocated),
        "the month has unallocated rows"
    );
    assert_eq!(csv.sum("BilledCost", unallocated), dec(&c["unallocated"]));
    // What consumers no team claims held is allocated too, on the platform's account.
    assert_eq!(
        csv.sum("BilledCost", |r| r[kind] == "Platform"
            && !r[method].is_empty()
            && !r[resource].is_empty()),
        dec(&c["unattributed"])
    );
    // Corrections, the sharing discount and rounding are no part of a split.
    let class = csv.col("ChargeClass");
    let meter = csv.col("SkuMeter");
    for r in &csv.rows {
        if r[class] == "Correction" || r[meter] == "Sharing discount" || r[meter] == "Rounding" {
            assert_eq!(r[method], "", "{r:?}");
        }
    }
    // 1.3 is 1.2 and eight columns more; 1.2 stays the default.
    let (_, v12) = focus(&app, &app.admin, "2026-09").await;
    assert_eq!(csv.headers.len(), v12.headers.len() + 8);
    assert!(!v12.headers.iter().any(|h| h.starts_with("Allocated")));
    assert_eq!(
        csv.sum("BilledCost", |_| true),
        v12.sum("BilledCost", |_| true)
    );
}

/// FOCUS 1.3's rules for the split cost allocation columns (specification/datasets/cost_and_usage/
/// columns/*.md of FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec at 1.3; ids from its requirements
/// model where it has them), each checked on a month of the worked example: one H100 with a
/// 3g.40gb, two 1g.10gb and the rest of it unallocated, every day.
#[tokio::test]
async fn focus_1_3_rules_allocatedresourceid_c_004_to_006_allocatedmethoddetails_c_005_to_007_serviceprovidername_c_003_m()
 {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 30).await;
    let csv = focus_1_3(&app, "2026-09").await;
    let col = |n: &str| csv.col(n);
    let (method, details, resource, name, tags) = (
        col("AllocatedMethodId"),
        col("AllocatedMethodDetails"),
        col("AllocatedResourceId"),
        col("AllocatedResourceName"),
        col("AllocatedTags"),
    );
    let meter = col("SkuMeter");
    let mut ratios: BTreeMap<String, Decimal> = BTreeMap::new();
    for r in &csv.rows {
        let split = !r[method].is_empty();
        // CAU-AllocatedResourceId-C-005-C: "MUST be null when a charge represents the
        // unallocated portion of the origin charge after split cost allocation".
        if r[meter] == "Unallocated capacity" {
            assert!(split && r[resource].is_empty(), "{r:?}");
        }
        // CAU-AllocatedResourceId-C-006-C: "MUST NOT be null when a charge represents the
        // allocated portion of the origin charge".
        if r[meter] == "GPU share held" {
            assert!(split && !r[resource].is_empty(), "{r:?}");
            assert_eq!(r[resource], r[col("ResourceId")]);
        }
        // CAU-AllocatedResourceId-C-004-C: "MUST be null when a charge is not related to a data
        // generator-calculated split cost allocation"; AllocatedResourceName: "MUST be null when
        // AllocatedResourceId is null" and "MUST NOT be null when AllocatedResourceId is not null".
        if !split {
            assert_eq!(
                (r[resource].as_str(), r[details].as_str()),
                ("", ""),
                "{r:?}"
            );
        }
        assert_eq!(r[name].is_empty(), r[resource].is_empty(), "{r:?}");
        // CAU-AllocatedMethodDetails-C-005-C (null when not split) and -C-006-C (SHOULD NOT be
        // null when split): every split row of this month has its details.
        assert_eq!(split, !r[details].is_empty(), "{r:?}");
        if split {
            // CAU-AllocatedMethodDetails-C-007-C: a top-level "Elements" array of objects, each
            // with "AllocatedRatio", FOCUS-defined keys spelt as the spec spells them and the
            // data generator's own prefixed "x_"; "UsageUnit" wherever "UsageQuantity" is.
            let d: Value = serde_json::from_str(&r[details]).unwrap();
            // A slice's row has a compute and a memory element, the unallocated row one per card.
            let elements = d["Elements"].as_array().expect("Elements");
            assert!(!elements.is_empty());
            for e in elements {
                let e = e.as_object().unwrap();
                for k in e.keys() {
                    assert!(
                        ["AllocatedRatio", "UsageUnit", "UsageQuantity"].contains(&k.as_str())
                            || k.starts_with("x_"),
                        "{k}"
                    );
                }
                assert!(!e.contains_key("UsageQuantity") || e["UsageUnit"] == "GPU-Hours");
                let ratio = Decimal::from_str(&e["AllocatedRatio"].to_string()).unwrap();
                *ratios
                    .entry(r[col("ChargePeriodStart")].clone())
                    .or_default() += ratio;
            }
            // AllocatedTags: key-value, none of its keys in Tags.
            if !r[tags].is_empty() {
                let own: BTreeMap<String, String> = serde_json::from_str(&r[tags]).unwrap();
                let row_tags: BTreeMap<String, String> =
                    serde_json::from_str(&r[col("Tags")]).unwrap();
                assert!(own.keys().all(|k| !row_tags.contains_key(k)), "{r:?}");
            }
        }
        // CAU-ServiceProviderName-C-003-M: "MUST NOT be null"; HostProviderName "MUST equal
        // ServiceProviderName" where the provider exposes no other host.
        assert!(!r[col("ServiceProviderName")].is_empty());
        assert_eq!(r[col("HostProviderName")], r[col("ServiceProviderName")]);
    }
    // "Values for all AllocatedRatio properties across all allocated charges related to a single
    // origin charge MUST sum up to 1": each day of the H100 (the only card) is split into
    // 3/7*0.5+4/8*0.5, two of 1/7*0.5+1/8*0.5, and what is left, exactly 1 as written.
    assert_eq!(ratios.len(), 30);
    for (day, sum) in ratios {
        assert_eq!(sum, Decimal::ONE, "{day}");
    }
}
