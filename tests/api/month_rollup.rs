//! The month rollup (issue 41, migration 0032): a team's month by workload read from a row per
//! slice and consumer of the month's summarised days gives the usage report to the last digit, and
//! is read only while its days are as it saw them and one rate card version prices them all; and
//! the books of an invoice run that name its build (migration 0034). It stays whole: its tests
//! share one fleet and the helpers that read the month's books as their readers do.

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
const IDLE_GPU: &str = "GPU-00000000-0000-4000-8000-000000003202";

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

/// A server with the example rate card, teams `nlp` and `vision`, and the [`fleet`] from the first
/// of last month to this hour; and when that is.
async fn spawn_with_fleet() -> (TestApp, DateTime<Utc>) {
    let app = TestApp::spawn().await;
    let out = app.cli(&["rate-card", "load", "deploy/rate-card.example.toml"]);
    assert!(out.status.success(), "{out:?}");
    for team in ["nlp", "vision"] {
        app.put_team(team, &[team]).await;
    }
    let now = Utc::now();
    fleet(&app, Month::of(now).minus(1).start(), floor_hour(now)).await;
    (app, now)
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

/// An hour of the embedder on another card, on `month`'s 10th, posted late: its day is closed.
async fn post_late_hour(app: &TestApp, month: Month) {
    let late = month.start() + Duration::days(9) + Duration::hours(4);
    post(
        app,
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
}

/// A rate card version from `month`'s 15th, the H100 dearer: the month is priced under two.
async fn card_from_the_15th(app: &TestApp, month: Month) {
    let from = (month.start() + Duration::days(14)).to_rfc3339();
    let r = crate::billing::rate_card(app, &from, "9.00").await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
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
    let (app, now) = spawn_with_fleet().await;
    let (this, today) = (Month::of(now), floor_day(now));
    let last = this.minus(1);
    let before = report(&app, last).await;
    let rows = rows_of(&before, last);
    assert_eq!(rows.len(), 2, "{before}");
    let embedder = rows.iter().find(|r| r.1 == "embedder").unwrap();
    let hours = (last.end() - last.start()).num_hours();
    assert_eq!(embedder.3, hours.to_string(), "{rows:?}");

    // Every closed day summarised, then the rollups built: the last month whole, this month's
    // closed days (none on its first day); nothing is due after.
    days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
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
    post_late_hour(&app, last).await;
    let with_late = report(&app, last).await;
    let late_rows = rows_of(&with_late, last);
    let embedder_late = late_rows.iter().find(|r| r.1 == "embedder").unwrap();
    assert_eq!(embedder_late.3, (hours + 1).to_string(), "{late_rows:?}");
    assert_ne!(embedder_late.4, embedder.4, "the late hour costs");
    tamper(&app, last).await;
    assert_eq!(report(&app, last).await, with_late);
    // Summarised again: the month is due, built from the late day's summary, and read again.
    days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
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
    card_from_the_15th(&app, last).await;
    let repriced = report(&app, last).await;
    let dearer = rows_of(&repriced, last);
    assert_ne!(
        dearer.iter().find(|r| r.1 == "embedder").unwrap().4,
        embedder_late.4
    );
    tamper(&app, last).await;
    assert_eq!(report(&app, last).await, repriced);
}

/// The month's drafts as finance reads them from a run: each team's total and lines.
async fn drafts(app: &TestApp, month: Month) -> Vec<Value> {
    let r = crate::billing::run(app, &month.to_string()).await;
    r.body["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| json!([d["team"], d["total"], d["lines"]]))
        .collect()
}

/// The month's books of usage as their readers see them: each team, slice and rate card version's
/// row with its sums and names, and its days in order (the books keep them in no order).
async fn books(app: &TestApp, month: Month) -> Vec<String> {
    sqlx::query_scalar(
        "select concat_ws(' ', b.team_id, b.team_name, b.model, b.kind, b.profile,
                          b.rate_card_id, b.slice_uuid, b.node, b.windows, b.first_day,
                          b.held_seconds, b.known_seconds, b.active_seconds,
                          b.memory_byte_seconds,
                          (select string_agg(concat_ws(',', d, w, h, k, a, m), ';'
                                             order by d, w, h, k, a, m)
                           from unnest(b.days, b.day_windows, b.day_held, b.day_known,
                                       b.day_active, b.day_memory) x(d, w, h, k, a, m)))
         from book_slice_days($1) b order by 1",
    )
    .bind(month.first_day())
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

/// The month's books of presence as their readers see them: each card's row with its days in
/// order, and the presence per model and day.
async fn presence_books(app: &TestApp, month: Month) -> Vec<String> {
    sqlx::query_scalar(
        "select concat_ws(' ', 'gpu', b.gpu_id, b.rate_card_id,
                          (select string_agg(concat_ws(',', d, p, c, m, t, y), ';' order by d)
                           from unnest(b.days, b.present_seconds,
                                       b.stranded_compute_slice_seconds,
                                       b.stranded_memory_slice_seconds,
                                       b.stranded_thread_percent_seconds,
                                       b.stranded_memory_byte_seconds) x(d, p, c, m, t, y)))
         from book_gpu_days($1) b
         union all
         select concat_ws(' ', 'model', m.model, m.rate_card_id, m.day, m.present_seconds,
                          m.memory_bytes, m.compute_slices, m.memory_slices,
                          m.stranded_compute_slice_seconds, m.stranded_memory_slice_seconds,
                          m.stranded_thread_percent_seconds, m.stranded_memory_byte_seconds)
         from book_model_day m where m.period = $1
         order by 1",
    )
    .bind(month.first_day())
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

/// The build `month`'s books name, if any, and the builds of the month kept.
async fn builds(app: &TestApp, month: Month) -> (Option<i64>, Vec<i64>) {
    let named: Option<i64> = sqlx::query_scalar("select month_build from book where period = $1")
        .bind(month.first_day())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let kept: Vec<i64> =
        sqlx::query_scalar("select build from usage_month_build where month = $1 order by build")
            .bind(month.start())
            .fetch_all(&app.pool)
            .await
            .unwrap();
    (named, kept)
}

/// The hours the month's books hold, all teams.
async fn held(app: &TestApp, month: Month) -> rust_decimal::Decimal {
    let seconds: String =
        sqlx::query_scalar("select sum(held_seconds)::text from book_slice_days($1)")
            .bind(month.first_day())
            .fetch_one(&app.pool)
            .await
            .unwrap();
    crate::billing::d(&seconds) / rust_decimal::Decimal::from(3600)
}

/// Halves the hours `month`'s rollup by slice holds, by hand: a run that reads it bills them.
/// (Doubled, they would be more than the cards had: the run refuses such figures.)
async fn tamper_slices(app: &TestApp, month: Month) {
    let n = sqlx::query(
        "update usage_month_slice
         set held_seconds = held_seconds / 2,
             day_held = array(select h / 2 from unnest(day_held) h)
         where month = $1",
    )
    .bind(month.start())
    .execute(&app.pool)
    .await
    .unwrap()
    .rows_affected();
    assert!(n > 0, "{month} has a rollup by slice");
}

// long: one month's runs in order (from its days, from its rollup, tampered, a late write, built
// again, a rate card version mid-month), each against the run before
#[tokio::test]
async fn an_invoice_run_writes_the_same_books_from_the_month_rollup_as_from_the_day_rollup() {
    let (app, now) = spawn_with_fleet().await;
    let last = Month::of(now).minus(1);

    // Before the month's days are summarised its run gathers the day rollup.
    let from_days = drafts(&app, last).await;
    assert_eq!(from_days.len(), 2, "{from_days:?}");
    let books_from_days = books(&app, last).await;
    let presence_from_days = presence_books(&app, last).await;
    assert_eq!(builds(&app, last).await, (None, vec![]));
    // A row per team and slice (the keeper's four pods on one), each held every hour.
    assert_eq!(books_from_days.len(), 2, "{books_from_days:?}");
    // A card, and its model's days.
    let days_in_month = (last.end() - last.start()).num_days() as usize;
    assert_eq!(
        presence_from_days.len(),
        1 + days_in_month,
        "{presence_from_days:?}"
    );
    let hours = (last.end() - last.start()).num_hours();
    assert_eq!(held(&app, last).await, (2 * hours).into());

    // Summarised and built: nothing is due, and the run writes the same books and drafts.
    days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
    month_rollup::build_due(&app.pool, now, 10).await.unwrap();
    assert_eq!(
        month_rollup::months_due(&app.pool, now).await.unwrap(),
        Vec::<Month>::new()
    );
    assert_eq!(drafts(&app, last).await, from_days);
    assert_eq!(books(&app, last).await, books_from_days);
    assert_eq!(presence_books(&app, last).await, presence_from_days);
    // The books name the build and keep no rows by slice nor days of their own: a row per team
    // and card, where the names that can change are frozen.
    let (named, kept) = builds(&app, last).await;
    assert_eq!(
        (named.is_some(), kept.len()),
        (true, 1),
        "{named:?} {kept:?}"
    );
    let own: i64 = sqlx::query_scalar(
        "select (select count(*) from book_slice where period = $1)
              + (select count(*) from book_gpu where period = $1 and days is not null)",
    )
    .bind(last.first_day())
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(own, 0);

    // The run reads the rollup: halved by hand, it bills half the hours.
    tamper_slices(&app, last).await;
    let halved = drafts(&app, last).await;
    assert_ne!(halved, from_days);
    assert_eq!(held(&app, last).await, hours.into());
    build_anew(&app, last, now).await;
    assert_eq!(drafts(&app, last).await, from_days);
    assert_eq!(books(&app, last).await, books_from_days);

    // A late hour on another card on the 10th: the day is stale and the month due, so the run
    // gathers the day rollup again (the rollup, halved again, is not read) and bills the hour.
    tamper_slices(&app, last).await;
    post_late_hour(&app, last).await;
    assert_eq!(
        month_rollup::months_due(&app.pool, now).await.unwrap(),
        [last]
    );
    let with_late = drafts(&app, last).await;
    assert_eq!(held(&app, last).await, (2 * hours + 1).into());
    let books_with_late = books(&app, last).await;
    assert_eq!(books_with_late.len(), 3, "{books_with_late:?}");
    // Summarised again, the month is still due; built, its run reads the rollup: the same books.
    days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
    assert_eq!(
        month_rollup::months_due(&app.pool, now).await.unwrap(),
        [last]
    );
    month_rollup::build_due(&app.pool, now, 10).await.unwrap();
    assert_eq!(drafts(&app, last).await, with_late);
    assert_eq!(books(&app, last).await, books_with_late);

    // A rate card version from the 15th: the month is priced under two versions, so its run
    // gathers its days (the rollup, tampered, is not read) and its books split each slice there.
    tamper_slices(&app, last).await;
    card_from_the_15th(&app, last).await;
    let repriced = drafts(&app, last).await;
    assert_ne!(repriced, with_late);
    assert_eq!(held(&app, last).await, (2 * hours + 1).into());
    assert_eq!(books(&app, last).await.len(), 5);
}

/// The month's FOCUS export as finance downloads it, and its card's ledger by day.
async fn focus(app: &TestApp, month: Month) -> (String, Value) {
    let r = app
        .get(
            Some(&app.admin),
            &format!("/v1/exports/focus?period={month}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let day = |t: DateTime<Utc>| t.format("%Y-%m-%d").to_string();
    let ledger = app
        .get(
            Some(&app.admin),
            &format!(
                "/v1/gpus/{GPU}/ledger?from={}&to={}&step=day",
                day(month.start()),
                day(month.end())
            ),
        )
        .await;
    assert_eq!(ledger.status, StatusCode::OK, "{ledger:?}");
    (r.body.as_str().unwrap().to_owned(), ledger.body)
}

// long: one issued month through a late write and its rollup built again, each step against the
// books as issued
#[tokio::test]
async fn issued_books_keep_the_month_rollup_build_they_name() {
    let (app, now) = spawn_with_fleet().await;
    let last = Month::of(now).minus(1);
    days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
    month_rollup::build_due(&app.pool, now, 10).await.unwrap();
    let run = crate::billing::run(&app, &last.to_string()).await;
    assert_eq!(run.status, StatusCode::OK, "{run:?}");
    for draft in run.body["drafts"].as_array().unwrap() {
        let r = crate::billing::issue(&app, &draft["id"]).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    let (named, kept) = builds(&app, last).await;
    let named = named.expect("the books name the month rollup's build");
    assert_eq!(kept, [named]);
    let issued = (
        books(&app, last).await,
        presence_books(&app, last).await,
        focus(&app, last).await,
    );
    // Two rows of books, the export a row per slice and day at least, and the card's ledger from
    // the books (both slices and the card's presence each day).
    assert_eq!(issued.0.len(), 2);
    let days_in_month = (last.end() - last.start()).num_days() as usize;
    assert!(issued.2.0.lines().count() > 2 * days_in_month);
    assert!(
        issued.2.1.to_string().contains("MIG-32-1g"),
        "{}",
        issued.2.1
    );

    // The team renamed under a new cost centre and the card moved to another node: the issued
    // books keep the names they were written with.
    for sql in [
        "update team set display_name = 'Vision (renamed)', cost_center = 'CC-9' where team_id = 'vision'",
        "update gpu set node = 'gpu-node-99' where node = 'gpu-node-32'",
    ] {
        let changed = sqlx::query(sql).execute(&app.pool).await.unwrap();
        assert_eq!(changed.rows_affected(), 1, "{sql}");
    }
    assert_eq!(books(&app, last).await, issued.0);
    assert!(
        issued.0.iter().any(|b| b.contains("gpu-node-32")),
        "{:?}",
        issued.0
    );

    // An hour comes late: its day is summarised again and the month built anew. The new build is
    // the rollup's; the issued books keep theirs, and read as they were issued.
    post_late_hour(&app, last).await;
    days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
    month_rollup::build_due(&app.pool, now, 10).await.unwrap();
    let (still, kept) = builds(&app, last).await;
    assert_eq!(still, Some(named));
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[0], named);
    assert_eq!(books(&app, last).await, issued.0);
    assert_eq!(presence_books(&app, last).await, issued.1);
    let now_read = focus(&app, last).await;
    assert_eq!(now_read.0, issued.2.0, "the FOCUS export");
    // The card's ledger names the card where it is now; its days are the books'.
    assert_eq!(now_read.1["node"], "gpu-node-99");
    assert_eq!(now_read.1["steps"], issued.2.1["steps"], "the ledger");

    // The build the issued books name refuses a change to its rows, and is not removed (its
    // rows refuse first).
    for sql in [
        "update usage_month_slice set held_seconds = 0 where build = $1",
        "delete from usage_month_gpu where build = $1",
        "delete from usage_month_build where build = $1",
    ] {
        let refused = sqlx::query(sql)
            .bind(named)
            .execute(&app.pool)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains(&format!(
                "the month rollup build {named} is named by the issued books of {last} and \
                 cannot be changed"
            )),
            "{sql}: {refused}"
        );
    }
    // Built anew once more, the build in between, which no book names, is swept.
    build_anew(&app, last, now).await;
    let (_, kept) = builds(&app, last).await;
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[0], named);
    assert!(kept[1] > named);
    assert_eq!(focus(&app, last).await.0, issued.2.0);
}

/// A build says whether every card its slices are on has its row there, where the books freeze
/// the card's node: a card with usage and no presence (it reported none) has none. The run names
/// only a build that does, and gathers the day rollup otherwise: the same books and drafts.
#[tokio::test]
async fn books_name_only_a_build_whose_cards_cover_its_slices() {
    let (app, now) = spawn_with_fleet().await;
    let last = Month::of(now).minus(1);
    let from_days = drafts(&app, last).await;
    let books_from_days = books(&app, last).await;
    days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
    month_rollup::build_due(&app.pool, now, 10).await.unwrap();
    let pool = app.pool.clone();
    let covers = move || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, bool>(
                "select b.gpus_cover_slices from usage_month_build b
                 join usage_month_done d using (build) where d.month = $1",
            )
            .bind(last.start())
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert!(covers().await);

    // A build that does not cover them (by hand): the run leaves it unnamed.
    sqlx::query("update usage_month_build set gpus_cover_slices = false")
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(drafts(&app, last).await, from_days);
    assert_eq!(books(&app, last).await, books_from_days);
    assert_eq!(builds(&app, last).await.0, None);
    let own: i64 = sqlx::query_scalar("select count(*) from book_slice where period = $1")
        .bind(last.first_day())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(own, 2, "the books hold their own rows");

    // Built without the card's presence of the month, the build says so.
    let removed = sqlx::query("delete from gpu_daily where day >= $1 and day < $2")
        .bind(last.start())
        .bind(last.end())
        .execute(&app.pool)
        .await
        .unwrap();
    assert!(removed.rows_affected() > 0);
    build_anew(&app, last, now).await;
    assert!(!covers().await);
}

/// A late batch of an idle card (its presence, no usage) changes the month rollup's presence per
/// GPU as a late hour of usage changes its slices: its day is stale and the month due, and built
/// again, the run's books have the card's hour.
#[tokio::test]
async fn a_late_batch_of_an_idle_card_makes_its_month_due() {
    let (app, now) = spawn_with_fleet().await;
    let last = Month::of(now).minus(1);
    days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
    month_rollup::build_due(&app.pool, now, 10).await.unwrap();
    assert_eq!(
        month_rollup::months_due(&app.pool, now).await.unwrap(),
        Vec::<Month>::new()
    );
    crate::billing::run(&app, &last.to_string()).await;
    let before = presence_books(&app, last).await;
    assert!(!before.is_empty());
    let late = last.start() + Duration::days(9);
    post(
        &app,
        "gpu-node-32c",
        late,
        late + Duration::hours(1),
        json!([gpu(IDLE_GPU, true)]),
        json!([]),
        vec![],
    )
    .await;
    assert_eq!(
        month_rollup::months_due(&app.pool, now).await.unwrap(),
        [last]
    );
    // Written again, the day settles before it is summarised again: not by a round that reads the
    // marks made before the write, and by one after (migration 0035).
    let unsettled = days::summarise_due(&app.pool, now, 100).await.unwrap();
    assert!(
        unsettled.summarised.is_empty(),
        "{:?}",
        unsettled.summarised
    );
    days::summarise_due(&app.pool, Utc::now(), 100)
        .await
        .unwrap();
    month_rollup::build_due(&app.pool, now, 10).await.unwrap();
    crate::billing::run(&app, &last.to_string()).await;
    assert!(builds(&app, last).await.0.is_some());
    let after = presence_books(&app, last).await;
    // One more card, present 3,600 s on the 10th.
    assert_eq!(after.len(), before.len() + 1, "{after:#?}");
    let idle: i32 = sqlx::query_scalar("select gpu_id from gpu where gpu_uuid = $1")
        .bind(IDLE_GPU)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let card = after
        .iter()
        .find(|r| r.starts_with(&format!("gpu {idle} ")))
        .unwrap_or_else(|| panic!("no books of the idle card: {after:#?}"));
    assert!(
        card.contains(&format!("{},3600", late.format("%Y-%m-%d %H:%M:%S+00"))),
        "{card}"
    );
}
