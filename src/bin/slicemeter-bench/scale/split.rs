//! `scale`'s measure of what the fleet-wide split (placeable and stranded unallocated capacity,
//! issue 43) adds to the monthly report and the invoice run.

use std::time::{Duration, Instant};

use slicemeter::billing::store as billing_store;
use slicemeter::domain::time::Month;

/// The fleet-wide split of unallocated capacity into placeable and stranded (issue 43: at most
/// 10 % added to the monthly report and the invoice run), measured in the same run as its own
/// statements: the stranded read beside presence (the monthly report reads it from the rollups,
/// the invoice run from the books it has just written), and the books' per-GPU-day rows
/// (`book_gpu_day`) the run writes for it, written again in a transaction rolled back. What each
/// adds is its time over the rest of the answer's. Printed with `line`, as `scale` prints.
pub(super) async fn split_part(
    pool: &sqlx::PgPool,
    month: Month,
    floor: Duration,
    report: Duration,
    run: Duration,
    line: fn(&str, Duration, Duration, &str),
) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?;
    let t = Instant::now();
    let models = billing_store::stranded_seconds(&mut conn, month, false).await?;
    let read_rollups = t.elapsed();
    let t = Instant::now();
    billing_store::stranded_seconds(&mut conn, month, true).await?;
    let read_books = t.elapsed();
    drop(conn);
    let mut tx = pool.begin().await?;
    sqlx::query("delete from book_gpu_day where period = $1")
        .bind(month.first_day())
        .execute(&mut *tx)
        .await?;
    let t = Instant::now();
    let rows = billing_store::write_gpu_days(&mut tx, month).await?;
    let write = t.elapsed();
    tx.rollback().await?;
    let added = |part: Duration, whole: Duration| {
        100.0 * part.as_secs_f64() / whole.saturating_sub(part).as_secs_f64().max(1e-9)
    };
    line(
        "  the split in the monthly report",
        read_rollups,
        floor,
        &format!(
            "(the stranded read, {} models: adds {:.1} % to the rest)",
            models.len(),
            added(read_rollups, report)
        ),
    );
    let in_run = read_books + write;
    line(
        "  the split in the invoice run",
        in_run,
        floor,
        &format!(
            "(stranded read {:.3} s + {rows} book_gpu_day rows {:.3} s: adds {:.1} % to the rest)",
            read_books.as_secs_f64(),
            write.as_secs_f64(),
            added(in_run, run)
        ),
    );
    Ok(())
}
