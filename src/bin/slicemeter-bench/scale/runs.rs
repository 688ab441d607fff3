//! The invoice run again once the month's rollup is built (issue 42): a first run, its books
//! naming the month rollup's build (their sums and names written, their days the build's), and a
//! run after it, which replaces them; each run's drafts checked to be the drafts made from the day
//! rollup. Then the books alone, as the run writes them, rolled back.

use std::time::{Duration, Instant};

use chrono::Utc;
use slicemeter::billing::invoice::Invoice;
use slicemeter::billing::service::{self as billing, RunSummary};
use slicemeter::billing::store as billing_store;
use slicemeter::domain::access::Actor;
use slicemeter::domain::time::Month;
use sqlx::Connection;

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
    // The run's part that writes the books (the rest prices them and writes the drafts).
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin().await?;
    let t = Instant::now();
    billing_store::write_books(&mut tx, month).await?;
    let books = t.elapsed();
    let named: Option<i64> = sqlx::query_scalar("select month_build from book where period = $1")
        .bind(month.first_day())
        .fetch_one(&mut *tx)
        .await?;
    tx.rollback().await?;
    line(
        "  its books alone",
        books,
        floor,
        &format!(
            "({})",
            named.map_or("gathered from the day rollup".to_owned(), |b| format!(
                "naming the month rollup's build {b}"
            ))
        ),
    );
    Ok(())
}
