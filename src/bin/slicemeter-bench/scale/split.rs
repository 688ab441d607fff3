//! `scale`'s measure of what the fleet-wide split (placeable and stranded unallocated capacity,
//! issue 43) and the per-card ledger's books add to the monthly report and the invoice run.

use std::time::{Duration, Instant};

use slicemeter::billing::store as billing_store;
use slicemeter::domain::time::Month;
use sqlx::{Connection, PgConnection};

/// Presence per model, rate card version and day as the product read it before issue 43
/// (migration 0009's `period_model_day`, its rollups' part): no GPU geometry, nothing stranded, a
/// rate card version joined to every GPU-day, and not parallel safe. A function of the session
/// (`pg_temp`), so that it is planned as the product planned it.
const BEFORE: &str = "
    create function pg_temp.presence_before(p date)
    returns table (model text, rate_card_id bigint, day timestamptz, present_seconds numeric)
    language sql stable as $$
        select g.model, r.rate_card_id, h.day, sum(h.present_seconds)
        from (
            select d.day, d.day as at, d.gpu_id, d.present_seconds
            from gpu_daily d
            where d.day >= (p::timestamp at time zone 'UTC')
              and d.day < ((p + interval '1 month') at time zone 'UTC')
              and d.day not in (select split_days(p))
            union all
            select date_trunc('day', h.hour, 'UTC'), h.hour, h.gpu_id, h.present_seconds
            from gpu_hourly h
            where h.hour >= (p::timestamp at time zone 'UTC')
              and h.hour < ((p + interval '1 month') at time zone 'UTC')
              and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
        ) h
        join gpu g using (gpu_id)
        left join rate_card_span r
               on h.at >= r.effective_from and (r.effective_until is null or h.at < r.effective_until)
        group by g.model, r.rate_card_id, h.day
    $$";

/// The product's read of now without the split: `period_model_day`'s whole days (the benchmark's
/// month has no day a rate card version starts inside) without the geometry and the stranded sums.
const ALONE: &str = "
    select d.model, r.rate_card_id, d.day, d.present_seconds
    from (select g.model, d.day, sum(d.present_seconds) as present_seconds
          from gpu_daily d join gpu g using (gpu_id)
          where d.day >= ($1::timestamp at time zone 'UTC')
            and d.day < (($1 + interval '1 month') at time zone 'UTC')
          group by g.model, d.day) d
    left join rate_card_span r
           on d.day >= r.effective_from and (r.effective_until is null or d.day < r.effective_until)";

/// The report's presence read (per model and rate card version) over `rows`, the statement giving
/// presence per model, rate card version and day.
fn read(rows: &str) -> String {
    format!(
        "select x.model, x.rate_card_id, min(x.day), sum(x.present_seconds)
         from ({rows}) x(model, rate_card_id, day, present_seconds) group by 1, 2"
    )
}

/// The books' presence rows written from `rows` (no geometry, nothing stranded).
fn books(rows: &str) -> String {
    format!(
        "insert into book_model_day (period, model, rate_card_id, day, present_seconds)
         select $1, x.* from ({rows}) x(model, rate_card_id, day, present_seconds)"
    )
}

/// The least of three runs of `sql` (bound to the month's first day) on `conn`, each in a
/// transaction rolled back; for the books' statements (`books`), after the month's books of
/// presence and cards' days are cleared.
async fn least(
    conn: &mut PgConnection,
    month: Month,
    sql: &str,
    books: bool,
) -> anyhow::Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let mut tx = conn.begin().await?;
        for table in ["book_model_day", "book_gpu"].into_iter().filter(|_| books) {
            sqlx::query(&format!("delete from {table} where period = $1"))
                .bind(month.first_day())
                .execute(&mut *tx)
                .await?;
        }
        let t = Instant::now();
        sqlx::query(sql)
            .bind(month.first_day())
            .execute(&mut *tx)
            .await?;
        best = best.min(t.elapsed());
        tx.rollback().await?;
    }
    Ok(best)
}

/// What the split adds (issue 43: at most 10 % to the monthly report and the invoice run), in the
/// same run, each statement the least of three on one connection: the report's presence read as
/// the product reads it now (`billing::store::presence_aggregates` over `period_model_day`: per
/// model, GPU geometry and day with the stranded seconds), the same read without the split,
/// and the read before issue 43; in the invoice run, the books' presence rows the same three ways,
/// and each card's days (`book_gpu`, `billing::store::write_gpu_days`, what the per-card ledger
/// and FOCUS split cost allocation of an issued month read). Printed with `line`, as `scale`
/// prints.
pub(super) async fn split_part(
    pool: &sqlx::PgPool,
    month: Month,
    floor: Duration,
    report: Duration,
    run: Duration,
    line: fn(&str, Duration, Duration, &str),
) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?;
    sqlx::query(BEFORE).execute(&mut *conn).await?;
    let before_rows = "select * from pg_temp.presence_before($1)";
    // The product's own read, as the report makes it.
    let mut read_now = Duration::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        billing_store::presence_aggregates(&mut conn, month, false).await?;
        read_now = read_now.min(t.elapsed());
    }
    let read_alone = least(&mut conn, month, &read(ALONE), false).await?;
    let read_before = least(&mut conn, month, &read(before_rows), false).await?;
    let books_now = least(
        &mut conn,
        month,
        "insert into book_model_day select * from period_model_day($1, false)",
        true,
    )
    .await?;
    let books_alone = least(&mut conn, month, &books(ALONE), true).await?;
    let books_before = least(&mut conn, month, &books(before_rows), true).await?;
    let mut cards = (Duration::MAX, 0);
    for _ in 0..3 {
        let mut tx = conn.begin().await?;
        sqlx::query("delete from book_gpu where period = $1")
            .bind(month.first_day())
            .execute(&mut *tx)
            .await?;
        let t = Instant::now();
        let rows = billing_store::write_gpu_days(&mut tx, month).await?;
        cards = cards.min((t.elapsed(), rows));
        tx.rollback().await?;
    }
    let pct = |part: f64, whole: Duration| 100.0 * part / whole.as_secs_f64();
    let secs = |d: Duration| d.as_secs_f64();
    // What each answer would have taken without the split, and what it took before issue 43.
    let report_alone = report.saturating_sub(read_now) + read_alone;
    let report_before = report.saturating_sub(read_now) + read_before;
    line(
        "  the split in the monthly report",
        read_now.saturating_sub(read_alone),
        floor,
        &format!(
            "(presence read {:.3} s with it, {:.3} s without, {:.3} s before issue 43: adds \
             {:.1} % to the report without it, {:+.1} % to the report before)",
            secs(read_now),
            secs(read_alone),
            secs(read_before),
            pct(secs(read_now) - secs(read_alone), report_alone),
            pct(secs(read_now) - secs(read_before), report_before),
        ),
    );
    let split = secs(books_now) - secs(books_alone);
    let run_alone = run.saturating_sub(books_now + cards.0) + books_alone;
    let run_before = run.saturating_sub(books_now + cards.0) + books_before;
    line(
        "  the split in the invoice run",
        books_now.saturating_sub(books_alone),
        floor,
        &format!(
            "(presence books {:.3} s with it, {:.3} s without, {:.3} s before issue 43: adds \
             {:.1} % to the run without it)",
            secs(books_now),
            secs(books_alone),
            secs(books_before),
            pct(split, run_alone),
        ),
    );
    line(
        "  cards' days in the invoice run",
        cards.0,
        floor,
        &format!(
            "({} rows: with the split, {:.1} % over the run without either, {:+.1} % over the \
             run before issue 43)",
            cards.1,
            pct(split + secs(cards.0), run_alone),
            pct(
                secs(books_now) + secs(cards.0) - secs(books_before),
                run_before
            ),
        ),
    );
    Ok(())
}
