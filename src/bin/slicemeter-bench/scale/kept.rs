//! `scale --pages-of-schema`: a month a run kept (`SLICEMETER_BENCH_KEEP=1`), opened for its
//! served pages only, so that two builds' pages are timed on the same rows; the days since are
//! summarised and the windows of days and the month rollups built first, and the team page's
//! evidence is timed alone, in process.

use std::time::{Duration, Instant};

use chrono::Utc;
use slicemeter::db;
use slicemeter::domain::team::TeamId;
use slicemeter::domain::time::Month;
use slicemeter::plan;
use slicemeter::reports;
use sqlx::postgres::PgConnectOptions;

use crate::common::group_by_floor;

/// The kept month's pool (migrated) and floor, after the evidence timed alone.
pub(super) async fn open(
    url: Option<&str>,
    schema: &str,
    month: Month,
    line: fn(&str, Duration, Duration, &str),
) -> anyhow::Result<(sqlx::PgPool, Duration)> {
    let url = url.ok_or_else(|| anyhow::anyhow!("--pages-of-schema needs DATABASE_URL"))?;
    let options: PgConnectOptions = url.parse()?;
    let pool = db::connect_with(options.options([("search_path", schema)]), 16).await?;
    db::migrate(&pool).await?;
    let (_, floor) = group_by_floor(&pool, month).await?;
    line("SELECT sum() GROUP BY team", floor, floor, "(the floor)");
    windows(&pool, floor, line).await?;
    // What the team page's evidence costs alone: the month's and right-sizing's 14 days, one read.
    let team = TeamId::parse("team-1")?;
    let ranges = [
        (month.start(), month.end()),
        plan::right_sizing_range(14, Utc::now()),
    ];
    // From the days' summaries alone (before the windows), then as the page reads it.
    for (pass, source) in [
        ("evidence, team-1, days", plan::store::Source::Days),
        ("evidence, team-1, alone", plan::store::Source::Summaries),
        ("evidence, team-1, again", plan::store::Source::Summaries),
    ] {
        let t = Instant::now();
        let read = plan::store::evidence_from(&pool, &ranges, Some(&team), source).await?;
        line(
            pass,
            t.elapsed(),
            floor,
            &format!("({} and {} groups)", read[0].len(), read[1].len()),
        );
    }
    // Each range alone: which of the two the read waits on.
    for (pass, range) in [
        ("evidence, team-1, the month alone", ranges[0]),
        ("evidence, team-1, right-sizing's days alone", ranges[1]),
    ] {
        let t = Instant::now();
        let read = plan::store::evidence_from(
            &pool,
            &[range],
            Some(&team),
            plan::store::Source::Summaries,
        )
        .await?;
        line(
            pass,
            t.elapsed(),
            floor,
            &format!("({} groups)", read[0].len()),
        );
    }
    Ok((pool, floor))
}

/// What serve's background step does before the pages are read: the closed days since the month
/// summarised (days with no usage are quick), the windows of days and the month rollups built,
/// each timed.
pub(super) async fn windows(
    pool: &sqlx::PgPool,
    floor: Duration,
    line: fn(&str, Duration, Duration, &str),
) -> anyhow::Result<()> {
    let now = Utc::now();
    let t = Instant::now();
    let round = plan::days::summarise_due(pool, now, 10_000).await?;
    line(
        "the days since summarised",
        t.elapsed(),
        floor,
        &format!("({} days)", round.summarised.len()),
    );
    let t = Instant::now();
    let built = plan::days::build_due_windows(pool, now).await?;
    line(
        "build the windows of days",
        t.elapsed(),
        floor,
        &format!("({})", crate::plan::windows_built(&built)),
    );
    let t = Instant::now();
    let built = reports::month_rollup::build_due(pool, now, 100).await?;
    let months: Vec<String> = built.iter().map(|(m, b)| format!("{m}: {b:?}")).collect();
    line(
        "build the month rollups",
        t.elapsed(),
        floor,
        &format!("({})", months.join("; ")),
    );
    Ok(())
}
