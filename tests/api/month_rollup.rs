//! The month rollup (issue 41, migration 0032): a team's month by workload read from a row per
//! slice and consumer of the month's summarised days gives the usage report to the last digit, and
//! is read only while its days are as it saw them and one rate card version prices them all.

use axum::http::StatusCode;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use slicemeter::domain::time::{Month, floor_day, floor_hour};
use slicemeter::plan::days;
use slicemeter::reports::month_rollup::{self, Built};

use crate::evidence_days::{GIB, gpu, hour, mig, post};
use crate::support::*;

const GPU: &str = "GPU-00000000-0000-4000-8000-000000003200";
const LATE_GPU: &str = "GPU-00000000-0000-4000-8000-000000003201";

/// Every hour from `from` to `end`, one batch a day: an embedder of `nlp` on a 3g.40gb, and a
/// keeper of `vision` on a 1g.10gb whose pod is replaced every 10 days.
async fn fleet(app: &TestApp, from: DateTime<Utc>, end: DateTime<Utc>) {
    let slices = json!([
        mig("MIG-32-3g", GPU, "3g.40gb", 9, 3, 4, 42412802048),
        mig("MIG-32-1g", GPU, "1g.10gb", 19, 1, 1, 10468982784),
    ]);
    let mut day = from;
    while day < end {
        let to = (day + Duration::days(1)).min(end);
        let mut windows = Vec::new();
        let mut t = day;
        while t < to {
            let n = (t - from).num_hours();
            windows.push(hour(
                "MIG-32-3g",
                t,
                "nlp",
                "embedder",
                "a1",
                6 * GIB + n % 5 * GIB / 10,
                Some(0.05 + (n % 7) as f64 / 100.0),
            ));
            windows.push(hour(
                "MIG-32-1g",
                t,
                "vision",
                "keeper",
                &format!("k{}", n / 240),
                2 * GIB,
                (n % 3 != 0).then_some(0.4),
            ));
            t += Duration::hours(1);
        }
        post(
            app,
            "gpu-node-32",
            day,
            to,
            json!([gpu(GPU, true)]),
            slices.clone(),
            windows,
        )
        .await;
        day += Duration::days(1);
    }
}

/// The usage report of the last month and this one by month, team, namespace, workload and profile.
async fn report(app: &TestApp, last: Month) -> Value {
    let uri = format!(
        "/v1/reports/usage?from={}&to={}&step=month&group_by=team,namespace,workload,profile",
        last.start().to_rfc3339().replace('+', "%2B"),
        last.next().end().to_rfc3339().replace('+', "%2B"),
    );
    let r = app.get(Some(&app.admin), &uri).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    r.body
}

/// The rows of `month` in `report`, each as (team, workload, profile, slice hours, cost).
fn rows_of(report: &Value, month: Month) -> Vec<(String, String, String, String, String)> {
    let at = month.start();
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["bucket"]
                .as_str()
                .unwrap()
                .parse::<DateTime<Utc>>()
                .unwrap()
                == at
        })
        .map(|r| {
            let k = |f: &str| r["key"][f].as_str().unwrap_or("-").to_owned();
            (
                k("team"),
                k("workload"),
                k("profile"),
                r["slice_hours"].as_str().unwrap().to_owned(),
                r["cost"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect()
}

/// Doubles what `month`'s rollup holds, by hand: a report that reads it shows it.
async fn tamper(app: &TestApp, month: Month) {
    let n = sqlx::query("update usage_month set held_seconds = held_seconds * 2 where month = $1")
        .bind(month.start())
        .execute(&app.pool)
        .await
        .unwrap()
        .rows_affected();
    assert!(n > 0, "{month} has a rollup");
}

/// Builds `month`'s rollup anew, as if never built: what undoes [`tamper`].
async fn build_anew(app: &TestApp, month: Month, now: DateTime<Utc>) -> Built {
    sqlx::query("delete from usage_month_done where month = $1")
        .bind(month.start())
        .execute(&app.pool)
        .await
        .unwrap();
    month_rollup::build_month(&app.pool, month, now)
        .await
        .unwrap()
}

// long: one fleet's story in order (read from days, rollups built, tampered, a late write, built
// again, a rate card version mid-month), each step checked against the one before
#[tokio::test]
async fn a_month_by_workload_reads_its_rollup_only_while_its_days_are_as_the_rollup_saw_them() {
    let app = TestApp::spawn().await;
    let out = app.cli(&["rate-card", "load", "deploy/rate-card.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    for team in ["nlp", "vision"] {
        app.put_team(team, &[team]).await;
    }
    let now = Utc::now();
    let (this, today) = (Month::of(now), floor_day(now));
    let last = this.minus(1);
    fleet(&app, last.start(), floor_hour(now)).await;
    let before = report(&app, last).await;
    let rows = rows_of(&before, last);
    assert_eq!(rows.len(), 2, "{before}");
    let embedder = rows.iter().find(|r| r.1 == "embedder").unwrap();
    let hours = (last.end() - last.start()).num_hours();
    assert_eq!(embedder.3, hours.to_string(), "{rows:?}");

    // Every closed day summarised, then the rollups built: the last month whole, this month's
    // closed days (none on its first day); nothing is due after.
    days::summarise_due(&app.pool, now, 100).await.unwrap();
    let built = month_rollup::build_due(&app.pool, now, 10).await.unwrap();
    let mut expected = vec![last];
    if today > this.start() {
        expected.insert(0, this);
    }
    assert_eq!(built.iter().map(|b| b.0).collect::<Vec<_>>(), expected);
    for (month, b) in &built {
        // A slice and consumer a row: the keeper's pods are consumers of their own.
        assert!(matches!(b, Built::Built(n) if *n >= 2), "{month}: {b:?}");
    }
    assert_eq!(
        month_rollup::build_due(&app.pool, now, 10).await.unwrap(),
        vec![]
    );
    assert_eq!(
        month_rollup::build_month(&app.pool, last, now)
            .await
            .unwrap(),
        Built::UpToDate
    );
    assert_eq!(report(&app, last).await, before);

    // The report reads the rollup: its rows doubled by hand double the month's figures.
    tamper(&app, last).await;
    let tampered = rows_of(&report(&app, last).await, last);
    let doubled = tampered.iter().find(|r| r.1 == "embedder").unwrap();
    assert_eq!(doubled.3, (2 * hours).to_string(), "{tampered:?}");
    assert!(matches!(build_anew(&app, last, now).await, Built::Built(_)));
    assert_eq!(report(&app, last).await, before);

    // A late write to the last month's 10th: an hour of the embedder on another card. The day is
    // stale, so the month is read from its days (the rollup, doubled again, is not read) and has
    // the hour at once.
    let late = last.start() + Duration::days(9) + Duration::hours(4);
    post(
        &app,
        "gpu-node-32b",
        late,
        late + Duration::hours(1),
        json!([gpu(LATE_GPU, true)]),
        json!([mig(
            "MIG-32-late",
            LATE_GPU,
            "3g.40gb",
            9,
            3,
            4,
            42412802048
        )]),
        vec![hour(
            "MIG-32-late",
            late,
            "nlp",
            "embedder",
            "b2",
            30 * GIB,
            Some(0.9),
        )],
    )
    .await;
    let with_late = report(&app, last).await;
    let late_rows = rows_of(&with_late, last);
    let embedder_late = late_rows.iter().find(|r| r.1 == "embedder").unwrap();
    assert_eq!(embedder_late.3, (hours + 1).to_string(), "{late_rows:?}");
    assert_ne!(embedder_late.4, embedder.4, "the late hour costs");
    tamper(&app, last).await;
    assert_eq!(report(&app, last).await, with_late);
    // Summarised again: the month is due, built from the late day's summary, and read again.
    days::summarise_due(&app.pool, now, 100).await.unwrap();
    let rebuilt = month_rollup::build_due(&app.pool, now, 10).await.unwrap();
    assert_eq!(rebuilt.len(), 1, "{rebuilt:?}");
    assert!(
        matches!(rebuilt[0], (m, Built::Built(_)) if m == last),
        "{rebuilt:?}"
    );
    assert_eq!(report(&app, last).await, with_late);
    tamper(&app, last).await;
    assert_ne!(report(&app, last).await, with_late);
    build_anew(&app, last, now).await;
    assert_eq!(report(&app, last).await, with_late);

    // A rate card version from the last month's 15th prices its days under two versions: the
    // rollup is not read for that month (tampered, the report stays), and the second half costs
    // the new price.
    let r = crate::billing::rate_card(
        &app,
        &(last.start() + Duration::days(14)).to_rfc3339(),
        "9.00",
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let repriced = report(&app, last).await;
    let dearer = rows_of(&repriced, last);
    assert_ne!(
        dearer.iter().find(|r| r.1 == "embedder").unwrap().4,
        embedder_late.4
    );
    tamper(&app, last).await;
    assert_eq!(report(&app, last).await, repriced);
}
