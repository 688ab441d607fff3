//! `scale`'s measure of what the fleet-wide split (placeable and stranded unallocated capacity,
//! issue 43) and the per-card ledger's books add to the monthly report and the invoice run.

use std::time::{Duration, Instant};

use slicemeter::billing::store as billing_store;
use slicemeter::domain::time::Month;

/// The month's presence per model and rate card version as it was read before the split: the same
/// statement as `period_model_day`'s whole days (the benchmark's month has no day a rate card
/// version starts inside), without the GPU geometry and the stranded seconds.
const PRESENCE_ALONE: &str = "
    select d.model, r.rate_card_id, min(d.day), sum(d.present_seconds)
    from (select g.model, d.day, sum(d.present_seconds) as present_seconds
          from gpu_daily d join gpu g using (gpu_id)
          where d.day >= $1 and d.day < $2
          group by g.model, d.day) d
    left join rate_card_span r
           on d.day >= r.effective_from and (r.effective_until is null or d.day < r.effective_until)
    group by 1, 2";

/// The books' presence rows as they were written before the split (no geometry, nothing stranded).
const PRESENCE_ALONE_BOOKS: &str = "
    insert into book_model_day (period, model, rate_card_id, day, present_seconds)
    select $3, d.model, r.rate_card_id, d.day, d.present_seconds
    from (select g.model, d.day, sum(d.present_seconds) as present_seconds
          from gpu_daily d join gpu g using (gpu_id)
          where d.day >= $1 and d.day < $2
          group by g.model, d.day) d
    left join rate_card_span r
           on d.day >= r.effective_from and (r.effective_until is null or d.day < r.effective_until)";

/// The least of three runs of `f`, so that a neighbour's burst does not decide a difference of a
/// few hundredths of a second.
async fn least<F, Fut>(mut f: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        f().await?;
        best = best.min(t.elapsed());
    }
    Ok(best)
}

/// What the split adds (issue 43: at most 10 % to the monthly report and the invoice run),
/// measured in the same run, each statement the least of three: the report's presence read with
/// the split (`billing::store::presence_aggregates`: per model, GPU geometry and day, with the
/// stranded seconds) against the same read without it; in the invoice run, the books' presence
/// rows with and without it, and each card's days (`book_gpu`, `billing::store::write_gpu_days`),
/// written in transactions rolled back. Printed with `line`, as `scale` prints.
pub(super) async fn split_part(
    pool: &sqlx::PgPool,
    month: Month,
    floor: Duration,
    report: Duration,
    run: Duration,
    line: fn(&str, Duration, Duration, &str),
) -> anyhow::Result<()> {
    let (start, end, p) = (month.start(), month.end(), month.first_day());
    let with = least(|| async {
        let mut conn = pool.acquire().await?;
        billing_store::presence_aggregates(&mut conn, month, false).await?;
        Ok(())
    })
    .await?;
    let alone = least(|| async {
        sqlx::query(PRESENCE_ALONE)
            .bind(start)
            .bind(end)
            .fetch_all(pool)
            .await?;
        Ok(())
    })
    .await?;
    let in_report = with.saturating_sub(alone);
    // The books: each statement on the books the run left, in a transaction rolled back.
    let books = |sql: &'static str| async move {
        let mut tx = pool.begin().await?;
        sqlx::query("delete from book_model_day where period = $1")
            .bind(p)
            .execute(&mut *tx)
            .await?;
        let t = Instant::now();
        sqlx::query(sql)
            .bind(start)
            .bind(end)
            .bind(p)
            .execute(&mut *tx)
            .await?;
        let took = t.elapsed();
        tx.rollback().await?;
        anyhow::Ok(took)
    };
    let (mut rows_with, mut rows_alone) = (Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        rows_with = rows_with.min(
            books("insert into book_model_day select * from period_model_day($3, false)").await?,
        );
        rows_alone = rows_alone.min(books(PRESENCE_ALONE_BOOKS).await?);
    }
    let mut cards = (Duration::MAX, 0);
    for _ in 0..3 {
        let mut tx = pool.begin().await?;
        sqlx::query("delete from book_gpu where period = $1")
            .bind(p)
            .execute(&mut *tx)
            .await?;
        let t = Instant::now();
        let rows = billing_store::write_gpu_days(&mut tx, month).await?;
        cards = cards.min((t.elapsed(), rows));
        tx.rollback().await?;
    }
    let in_run = rows_with.saturating_sub(rows_alone) + cards.0;
    let added = |part: Duration, whole: Duration| {
        100.0 * part.as_secs_f64() / whole.saturating_sub(part).as_secs_f64().max(1e-9)
    };
    line(
        "  the split in the monthly report",
        in_report,
        floor,
        &format!(
            "(presence read {:.3} s with it, {:.3} s without: adds {:.1} % to the rest)",
            with.as_secs_f64(),
            alone.as_secs_f64(),
            added(in_report, report)
        ),
    );
    line(
        "  the split in the invoice run",
        in_run,
        floor,
        &format!(
            "(presence books {:.3} s with it, {:.3} s without; {} cards' days {:.3} s: adds {:.1} % \
             to the rest)",
            rows_with.as_secs_f64(),
            rows_alone.as_secs_f64(),
            cards.1,
            cards.0.as_secs_f64(),
            added(in_run, run)
        ),
    );
    Ok(())
}
