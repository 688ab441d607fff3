//! The invoice run again once the month's rollup is built (issue 42): a first run, its books
//! written from the month rollup by slice, and a run after it, which replaces them; each run's
//! drafts checked to be the drafts made from the day rollup.

use std::time::{Duration, Instant};

use chrono::Utc;
use slicemeter::billing::invoice::Invoice;
use slicemeter::billing::service::{self as billing, RunSummary};
use slicemeter::domain::access::Actor;
use slicemeter::domain::time::Month;

/// Each draft's team, total and lines: what finance reads of a run.
fn drafts(run: &RunSummary) -> anyhow::Result<Vec<serde_json::Value>> {
    Ok(run
        .drafts
        .iter()
        .map(|d: &Invoice| serde_json::to_value((&d.team, d.total, &d.lines)))
        .collect::<Result<_, _>>()?)
}

/// Times the run of `month` as a first run (its books removed first, as before a month's first
/// run) and as a run that replaces its books, against `before`, the run from the day rollup.
pub(super) async fn from_rollup(
    pool: &sqlx::PgPool,
    month: Month,
    before: &RunSummary,
    floor: Duration,
    line: fn(&str, Duration, Duration, &str),
) -> anyhow::Result<()> {
    for table in ["book", "book_slice", "book_model_day", "book_gpu"] {
        sqlx::query(&format!("delete from {table} where period = $1"))
            .bind(month.first_day())
            .execute(pool)
            .await?;
    }
    for what in [
        "invoice run, from the month rollup",
        "invoice run, again (books replaced)",
    ] {
        let t = Instant::now();
        let run = billing::run_drafts(pool, month, Utc::now(), &Actor::CLI).await?;
        line(
            what,
            t.elapsed(),
            floor,
            &format!("({} drafts)", run.drafts.len()),
        );
        anyhow::ensure!(
            drafts(&run)? == drafts(before)?,
            "{what}: the drafts differ from those made from the day rollup"
        );
    }
    Ok(())
}
