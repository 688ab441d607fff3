//! `GET /v1/reports/forecast`: the month-end forecast of a team whose cost per hour is constant,
//! against the rate card's price worked out here.

use std::str::FromStr;

use axum::http::StatusCode;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use slicemeter::domain::access::Role;
use slicemeter::domain::time::floor_hour;

use crate::billing::{dec, rate_card};
use crate::support::*;

/// `nlp` holds the H100's 3g.40gb every hour of the last nine days to the last whole hour.
pub async fn nine_steady_days(app: &TestApp) -> DateTime<Utc> {
    app.put_team("nlp", &["nlp"]).await;
    assert_eq!(
        rate_card(app, "2026-01-01T00:00:00Z", "4.00").await.status,
        StatusCode::CREATED
    );
    let to = floor_hour(Utc::now());
    let mut start = to - Duration::days(9);
    while start < to {
        let end = (start + Duration::days(1)).min(to);
        let mut windows = Vec::new();
        let mut h = start;
        while h < end {
            let next = h + Duration::hours(1);
            windows.push(window(
                MIG_3G,
                &h.to_rfc3339(),
                &next.to_rfc3339(),
                "nlp",
                "embedder-0",
                3600.0,
            ));
            h = next;
        }
        let r = app
            .ingest(
                &app.admin,
                &batch(&start.to_rfc3339(), &end.to_rfc3339(), windows),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        start = end;
    }
    to
}

#[tokio::test]
async fn a_team_at_a_constant_hourly_cost_is_forecast_spent_plus_that_rate_times_the_time_left() {
    let app = TestApp::spawn().await;
    let to = nine_steady_days(&app).await;
    let r = app.get(Some(&app.admin), "/v1/reports/forecast").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let f = &r.body;
    assert_eq!(f["currency"], "USD");
    let teams = f["teams"].as_array().unwrap();
    assert_eq!(teams.len(), 1, "{f}");
    let nlp = &teams[0];
    assert_eq!(nlp["team"], "nlp");

    // A 3g.40gb of an H100 at 4.00 an hour: 4 x (0.5 x 3/7 + 0.5 x 4/8) = 13/7 an hour.
    let rate = Decimal::from(13) / Decimal::from(7);
    let month_start: DateTime<Utc> = format!("{}-01T00:00:00Z", to.format("%Y-%m"))
        .parse()
        .unwrap();
    let hours_so_far = Decimal::from((to - month_start).num_hours());
    let spent = (rate * hours_so_far).round_dp(2);
    assert_eq!(dec(&nlp["spent"]), spent);
    assert_eq!(
        dec(&nlp["hourly_rate"]),
        Decimal::from_str("1.857143").unwrap()
    );
    // Seven whole days and today's whole hours.
    let today = to.date_naive().and_hms_opt(0, 0, 0).unwrap().and_utc();
    assert_eq!(
        dec(&nlp["measured_hours"]),
        Decimal::from(168 + (to - today).num_hours())
    );
    let as_of: DateTime<Utc> = f["as_of"].as_str().unwrap().parse().unwrap();
    let month_end = format!("{}T00:00:00Z", {
        let m = slicemeter::domain::time::Month::of(as_of).next();
        format!("{m}-01")
    })
    .parse::<DateTime<Utc>>()
    .unwrap();
    let seconds_left = Decimal::from((month_end - as_of).num_seconds());
    let want = (spent + rate * seconds_left / Decimal::from(3600)).round_dp(2);
    assert_eq!(dec(&nlp["forecast"]), want, "{nlp}");
    // Every day cost the same: the band is the forecast.
    assert_eq!(nlp["low"], nlp["forecast"]);
    assert_eq!(nlp["high"], nlp["forecast"]);

    // Spent is what the month's report says the team costs so far.
    let month = slicemeter::domain::time::Month::of(as_of);
    let report = app
        .get(Some(&app.admin), &format!("/v1/reports/monthly/{month}"))
        .await;
    assert_eq!(report.status, StatusCode::OK, "{report:?}");
    let row = report.body["teams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team"] == "nlp")
        .cloned();
    match row {
        Some(row) => assert_eq!(dec(&row["cost"]), spent),
        None => assert_eq!(spent, Decimal::ZERO, "no hour of the month yet"),
    }
}

#[tokio::test]
async fn a_team_lead_gets_their_own_forecast_and_a_refusal_for_another_teams() {
    let app = TestApp::spawn().await;
    nine_steady_days(&app).await;
    app.put_team("vision", &["vision"]).await;
    let nlp = app.token(Role::TeamLead, Some("nlp"), None).await;
    let vision = app.token(Role::TeamLead, Some("vision"), None).await;

    let own = app.get(Some(&nlp), "/v1/reports/forecast").await;
    assert_eq!(own.status, StatusCode::OK, "{own:?}");
    assert_eq!(own.body["teams"][0]["team"], "nlp");
    let theirs = app.get(Some(&vision), "/v1/reports/forecast").await;
    assert_eq!(theirs.status, StatusCode::OK, "{theirs:?}");
    assert_eq!(
        theirs.body["teams"],
        serde_json::json!([]),
        "vision has no usage"
    );
    let asked = app
        .get(Some(&vision), "/v1/reports/forecast?team=nlp")
        .await;
    assert_eq!(asked.status, StatusCode::FORBIDDEN, "{asked:?}");

    let bad = app
        .get(Some(&app.admin), "/v1/reports/forecast?team=NLP!")
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{bad:?}");
    assert_eq!(bad.body["error"]["fields"][0]["field"], "team");
    let unknown = app
        .get(Some(&app.admin), "/v1/reports/forecast?teams=nlp")
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{unknown:?}");
}
