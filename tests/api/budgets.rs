//! `/v1/budgets`: a team's monthly budget, the current month against it (in the forecast's money),
//! the thresholds crossed, each bad field named, who may see and change it, and the audit trail.

use axum::http::StatusCode;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use slicemeter::domain::access::Role;
use slicemeter::domain::time::Month;

use crate::billing::dec;
use crate::forecast::nine_steady_days;
use crate::support::*;

fn budget(team: &str, amount: &str) -> Value {
    json!({"team": team, "amount": amount, "currency": "USD",
           "thresholds": [{"kind": "forecast", "percent": 100}, {"kind": "forecast", "percent": 1000},
                          {"kind": "actual", "percent": 1000}]})
}

#[tokio::test]
async fn a_budget_shows_the_month_spent_and_forecast_against_it_and_the_thresholds_crossed() {
    let app = TestApp::spawn().await;
    nine_steady_days(&app).await;
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/budgets",
            &budget("nlp", "200.00"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let b = &r.body;
    assert_eq!(b["team"], "nlp");
    assert_eq!(dec(&b["amount"]), dec(&json!("200")));
    let now = &b["current"];
    let forecast = app.get(Some(&app.admin), "/v1/reports/forecast").await;
    let f = &forecast.body["teams"][0];
    // The budget's figures are the forecast's (read a moment apart: to the cent).
    assert_eq!(dec(&now["spent"]), dec(&f["spent"]));
    assert!((dec(&now["forecast"]) - dec(&f["forecast"])).abs() <= dec(&json!("0.01")));
    assert_eq!(dec(&now["budget"]), dec(&json!("200.00")));
    assert_eq!(
        dec(&now["spent_percent"]),
        (dec(&now["spent"]) / Decimal::from(2)).round_dp(2)
    );
    // A 3g.40gb all month at 13/7 an hour comes to 1,248 (28 days) to 1,382 (31 days) whatever
    // the day: past 100 % of 200.00, short of 1000 % both spent and forecast.
    assert_eq!(
        now["crossed"],
        json!([{"kind": "forecast", "percent": 100}]),
        "{now}"
    );
    assert!(now["note"].is_null());

    // One budget a team; the list has it, with its standing.
    let again = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/budgets",
            &budget("nlp", "5.00"),
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{again:?}");
    assert_eq!(again.body["error"]["code"], "budget_exists");
    let list = app.get(Some(&app.admin), "/v1/budgets").await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.body.as_array().unwrap().len(), 1);
    assert_eq!(list.body[0]["current"]["crossed"], now["crossed"]);
}

#[tokio::test]
async fn an_auto_budget_is_the_average_of_the_closed_months_the_monthly_reports_give() {
    let app = TestApp::spawn().await;
    nine_steady_days(&app).await;
    let mut body = budget("nlp", "auto");
    body["auto_months"] = json!(1);
    let r = app
        .send_json("POST", Some(&app.admin), "/v1/budgets", &body)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert!(r.body["amount"].is_null());
    assert_eq!(r.body["auto_months"], 1);
    let last = Month::of(chrono::Utc::now()).minus(1);
    let report = app
        .get(Some(&app.admin), &format!("/v1/reports/monthly/{last}"))
        .await;
    assert_eq!(report.status, StatusCode::OK, "{report:?}");
    let cost = report.body["teams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team"] == "nlp")
        .map(|t| dec(&t["cost"]))
        .unwrap_or_default();
    let now = &r.body["current"];
    if cost > Decimal::ZERO {
        assert_eq!(dec(&now["budget"]), cost, "{now}");
    } else {
        // Nine days back reach last month only early in a month.
        assert!(now["budget"].is_null(), "{now}");
        assert!(
            now["note"]
                .as_str()
                .unwrap()
                .contains("no cost in the last 1 closed months")
        );
    }
}

#[tokio::test]
async fn each_bad_field_of_a_budget_is_named_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    let post = |body: Value| {
        let app = &app;
        async move {
            app.send_json("POST", Some(&app.admin), "/v1/budgets", &body)
                .await
        }
    };
    let r = post(json!({"team": "nlp", "amount": "-1", "currency": "usd",
                        "thresholds": [{"kind": "spent", "percent": 0}]}))
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(
        field_names(&r),
        vec![
            "amount",
            "currency",
            "thresholds[0].kind",
            "thresholds[0].percent"
        ]
    );
    let r = post(budget("nobody", "10.00")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(r.body["error"]["fields"][0]["field"], "team");
    assert!(
        r.body["error"]["fields"][0]["message"]
            .as_str()
            .unwrap()
            .contains("no team \"nobody\"")
    );
    let r = post(budget("unattributed", "10.00")).await;
    assert_eq!(field_names(&r), vec!["team"], "{r:?}");
    let mut no_team = budget("nlp", "10.00");
    no_team.as_object_mut().unwrap().remove("team");
    let r = post(no_team).await;
    assert_eq!(r.body["error"]["fields"][0]["field"], "team", "{r:?}");
    let mut extra = budget("nlp", "10.00");
    extra["notify"] = json!([]);
    assert_eq!(post(extra).await.status, StatusCode::BAD_REQUEST);
    assert_eq!(app.count("select count(*) from budget").await, 0);
}

#[tokio::test]
async fn a_team_lead_reads_their_teams_budget_only_and_finance_changes_it_on_the_record() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    app.put_team("vision", &["vision"]).await;
    let finance = app.token(Role::Finance, None, None).await;
    let lead = app.token(Role::TeamLead, Some("vision"), None).await;
    let made = app
        .send_json(
            "POST",
            Some(&finance),
            "/v1/budgets",
            &budget("nlp", "100.00"),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{made:?}");
    let id = made.body["id"].as_i64().unwrap();
    assert!(
        made.body["current"]["crossed"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // The lead of vision sees no budget of nlp's, by list or by id, and may not make one.
    let list = app.get(Some(&lead), "/v1/budgets").await;
    assert_eq!(list.body, json!([]));
    let one = app.get(Some(&lead), &format!("/v1/budgets/{id}")).await;
    assert_eq!(one.status, StatusCode::NOT_FOUND, "{one:?}");
    let r = app
        .send_json(
            "POST",
            Some(&lead),
            "/v1/budgets",
            &budget("vision", "1.00"),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // Finance changes the amount; the team stays.
    let changed = app
        .send_json(
            "PUT",
            Some(&finance),
            &format!("/v1/budgets/{id}"),
            &budget("nlp", "250.50"),
        )
        .await;
    assert_eq!(changed.status, StatusCode::OK, "{changed:?}");
    assert_eq!(dec(&changed.body["amount"]), dec(&json!("250.50")));
    let moved = app
        .send_json(
            "PUT",
            Some(&finance),
            &format!("/v1/budgets/{id}"),
            &budget("vision", "1.00"),
        )
        .await;
    assert_eq!(moved.status, StatusCode::BAD_REQUEST);
    assert_eq!(moved.body["error"]["fields"][0]["field"], "team");

    let gone = app
        .request(
            axum::http::Request::builder()
                .method("DELETE")
                .uri(format!("/v1/budgets/{id}"))
                .header("authorization", format!("Bearer {finance}"))
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    let after = app.get(Some(&finance), &format!("/v1/budgets/{id}")).await;
    assert_eq!(after.status, StatusCode::NOT_FOUND);

    // Each change is in the audit log, by whom and with what it was.
    let audit = app.get(Some(&finance), "/v1/audit").await;
    let entries: Vec<(&str, &Value)> = audit
        .body
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"].as_str().unwrap().starts_with("budget."))
        .map(|e| (e["action"].as_str().unwrap(), &e["details"]))
        .collect();
    assert_eq!(
        entries.iter().map(|e| e.0).collect::<Vec<_>>(),
        vec!["budget.delete", "budget.update", "budget.create"]
    );
    assert_eq!(dec(&entries[1].1["amount"]), dec(&json!("250.50")));
    assert_eq!(
        dec(&entries[1].1["before"]["amount"]),
        dec(&json!("100.00"))
    );
    assert_eq!(entries[2].1["team"], "nlp");
}

#[tokio::test]
async fn a_budget_can_watch_one_namespace_a_label_or_a_quarter() {
    use chrono::{Datelike, Duration, TimeZone, Utc};
    let app = TestApp::spawn().await;
    let to = nine_steady_days(&app).await;
    app.put_team("nlp", &["nlp", "nlp-dev"]).await;
    let post = |body: Value| {
        let app = &app;
        async move {
            app.send_json("POST", Some(&app.admin), "/v1/budgets", &body)
                .await
        }
    };
    let with = |extra: Value| {
        let mut b = budget("nlp", "200.00");
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let whole = post(budget("nlp", "200.00")).await;
    assert_eq!(whole.status, StatusCode::CREATED, "{whole:?}");
    // All of nlp's usage is in namespace nlp: the same figures (the whole team's are its invoice
    // lines, the namespace's the usage report's exact cost: a cent apart at most).
    let ns = post(with(json!({"namespace": "nlp"}))).await;
    assert_eq!(ns.status, StatusCode::CREATED, "{ns:?}");
    assert_eq!(ns.body["namespace"], "nlp");
    let (a, b) = (&whole.body["current"], &ns.body["current"]);
    assert!(
        (dec(&a["spent"]) - dec(&b["spent"])).abs() <= dec(&json!("0.01")),
        "{a} {b}"
    );
    assert!(
        (dec(&a["forecast"]) - dec(&b["forecast"])).abs() <= dec(&json!("0.02")),
        "{a} {b}"
    );
    assert_eq!(b["crossed"], json!([{"kind": "forecast", "percent": 100}]));
    // Nothing ran in nlp-dev, nor under a label.
    for extra in [
        json!({"namespace": "nlp-dev"}),
        json!({"label": "app.kubernetes.io/name=embedder"}),
    ] {
        let r = post(with(extra.clone())).await;
        assert_eq!(r.status, StatusCode::CREATED, "{extra}: {r:?}");
        assert_eq!(dec(&r.body["current"]["spent"]), Decimal::ZERO, "{extra}");
        assert_eq!(
            dec(&r.body["current"]["forecast"]),
            Decimal::ZERO,
            "{extra}"
        );
        assert_eq!(r.body["current"]["crossed"], json!([]));
    }

    // The quarter: what the quarter has spent, plus 13/7 an hour to its end, to the cent.
    let before = Utc::now();
    let q = post(with(json!({"period": "quarter", "amount": "5000.00"}))).await;
    let after = Utc::now();
    assert_eq!(q.status, StatusCode::CREATED, "{q:?}");
    let month0 = to.month0();
    let q_start = Utc
        .with_ymd_and_hms(to.year(), month0 - month0 % 3 + 1, 1, 0, 0, 0)
        .unwrap();
    let q_end = if month0 >= 9 {
        Utc.with_ymd_and_hms(to.year() + 1, 1, 1, 0, 0, 0).unwrap()
    } else {
        Utc.with_ymd_and_hms(to.year(), month0 - month0 % 3 + 4, 1, 0, 0, 0)
            .unwrap()
    };
    let current = &q.body["current"];
    assert_eq!(
        current["period"],
        format!("{}-Q{}", to.year(), month0 / 3 + 1)
    );
    let rate = Decimal::from(13) / Decimal::from(7);
    let hours = Decimal::from((to - (to - Duration::days(9)).max(q_start)).num_hours());
    assert_eq!(dec(&current["spent"]), (rate * hours).round_dp(2));
    let projected = |at: chrono::DateTime<Utc>| {
        (rate * hours + rate * Decimal::from((q_end - at).num_seconds()) / Decimal::from(3600))
            .round_dp(2)
    };
    let forecast = dec(&current["forecast"]);
    assert!(
        projected(after) <= forecast && forecast <= projected(before),
        "{forecast} outside {}..{}",
        projected(after),
        projected(before)
    );

    // One budget a scope and period; what a budget watches does not change.
    let r = post(with(json!({"namespace": "nlp"}))).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    let id = ns.body["id"].as_i64().unwrap();
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            &format!("/v1/budgets/{id}"),
            &json!({"namespace": "nlp-dev", "period": "quarter", "amount": "300.00", "currency": "USD",
                    "thresholds": [{"kind": "actual", "percent": 50}]}),
        )
        .await;
    assert_eq!(field_names(&r), vec!["namespace", "period"], "{r:?}");
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            &format!("/v1/budgets/{id}"),
            &json!({"amount": "300.00", "currency": "USD",
                    "thresholds": [{"kind": "actual", "percent": 50}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["namespace"], "nlp", "left out, the scope stays");
    assert_eq!(r.body["period"], "month");

    // Each bad field named.
    let r = post(with(json!({"namespace": "vision"}))).await;
    assert_eq!(field_names(&r), vec!["namespace"], "{r:?}");
    assert!(
        fields(&r)[0].1.contains("its namespaces: nlp, nlp-dev"),
        "{r:?}"
    );
    let r = post(with(json!({"namespace": "nlp", "label": "a=b"}))).await;
    assert_eq!(field_names(&r), vec!["label"], "{r:?}");
    let r = post(with(json!({"label": "no-equals", "period": "year"}))).await;
    assert_eq!(field_names(&r), vec!["label", "period"], "{r:?}");
    let r = post(
        json!({"team": "nlp", "amount": "auto", "auto_months": 3, "currency": "USD",
                        "period": "quarter", "namespace": "nlp-dev", "idle_days": 2,
                        "thresholds": [{"kind": "actual", "percent": 50}]}),
    )
    .await;
    assert_eq!(field_names(&r), vec!["amount", "idle_days"], "{r:?}");
}
