//! PostgreSQL: the pool, the embedded migrations, monthly partitions, the SQL mapping of text-valued
//! types (`types`) and the private cluster `demo` and the tests start (`cluster`). It imports nothing
//! of the features above it; each feature keeps its own SQL in its `store.rs`.

pub mod cache;
pub mod cluster;
pub mod types;

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The first key of a closed day's advisory lock (migration 0029): writers of the day's hourly
/// rollups hold it shared, the step that summarises the day for right-sizing exclusively. A lock of
/// two `int4` keys, a space apart from the one-`bigint` keys taken elsewhere.
pub const EVIDENCE_DAY_LOCK: i32 = 41;

/// The second key of `day`'s lock: its number of days since the Unix epoch.
pub fn evidence_day_lock(day: chrono::DateTime<chrono::Utc>) -> i32 {
    i32::try_from(day.timestamp().div_euclid(86_400)).unwrap_or(i32::MAX)
}

/// Takes the transaction-scoped advisory lock (`class`, [`evidence_day_lock`] of `day`) without
/// waiting: false when another session holds it. The day summaries, windows of days and month
/// rollups each take theirs so.
pub async fn try_day_lock(
    tx: &mut PgConnection,
    class: i32,
    day: chrono::DateTime<chrono::Utc>,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select pg_try_advisory_xact_lock($1, $2)")
        .bind(class)
        .bind(evidence_day_lock(day))
        .fetch_one(tx)
        .await
}

/// Takes the transaction-scoped advisory lock (`class`, [`evidence_day_lock`] of `day`), waiting
/// for another session's: an invoice run takes its month rollup's so.
pub async fn day_lock(
    tx: &mut PgConnection,
    class: i32,
    day: chrono::DateTime<chrono::Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query("select pg_advisory_xact_lock($1, $2)")
        .bind(class)
        .bind(evidence_day_lock(day))
        .execute(tx)
        .await?;
    Ok(())
}

/// The first key of a window of days' advisory lock (migration 0031), its second the window's
/// first day's (`evidence_day_lock`): one builder of a window at a time (serve's replicas each run
/// the background step).
pub const EVIDENCE_WINDOW_LOCK: i32 = 4131;

/// The first key of a month rollup's advisory lock (migration 0032), its second the month's first
/// day's (`evidence_day_lock`): one builder of a month at a time, and none while an invoice run
/// names the month's current build in its books (migration 0034).
pub const MONTH_ROLLUP_LOCK: i32 = 4132;

/// Connects a pool to `url`. With `search_path` the pool works inside that schema only (the ingest
/// benchmark's scratch schema).
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    connect_with(PgConnectOptions::from_str(url)?, max_connections).await
}

pub async fn connect_with(
    options: PgConnectOptions,
    max_connections: u32,
) -> Result<PgPool, sqlx::Error> {
    pool_options(max_connections)
        .connect_with(session_defaults(options))
        .await
}

fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        // While the database is away, requests fail fast with 503 rather than queue.
        .acquire_timeout(Duration::from_secs(5))
}

fn session_defaults(options: PgConnectOptions) -> PgConnectOptions {
    // PostgreSQL's JIT compiles the reports' wide aggregations for longer than it saves:
    // measured at 2,000 GPUs, the month's usage by day took 3.9 s with it and 3.3 s without.
    options
        .application_name("slicemeter")
        .options([("jit", "off")])
}

/// How long a connection coming back to the request pool may take to answer a ping, when a
/// request was abandoned lately ([`request_abandoned`]). One whose request was dropped
/// mid-statement is still busy with that statement, so it takes longer; it is closed instead of
/// being waited out.
const RELEASE_PING: Duration = Duration::from_millis(500);

/// How long after a request was abandoned connections coming back are checked.
const ABANDONED_RECENTLY: Duration = Duration::from_secs(5);

/// How often PostgreSQL checks, while running a request's statement, that its client (this
/// server's connection) is still there (`client_connection_check_interval`, PostgreSQL 14 and
/// later), so that a statement whose connection was closed stops within this long.
const CLIENT_CHECK_MS: u32 = 1000;

/// When a request was last abandoned: milliseconds since [`clock`]'s start, plus one (0: never).
static LAST_ABANDONED: AtomicU64 = AtomicU64::new(0);

fn clock() -> Duration {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

/// Says that a request's work was dropped before it finished (its client went away, its time ran
/// out, an export's reader hung up): called before the work's connections are dropped, so that
/// the request pool checks the connections that come back next ([`connect_for_requests`]).
pub fn request_abandoned() {
    let ms = u64::try_from(clock().as_millis()).unwrap_or(u64::MAX - 1);
    LAST_ABANDONED.store(ms + 1, Ordering::Relaxed);
}

fn abandoned_recently() -> bool {
    match LAST_ABANDONED.load(Ordering::Relaxed) {
        0 => false,
        at => clock().saturating_sub(Duration::from_millis(at - 1)) < ABANDONED_RECENTLY,
    }
}

/// A pool for the server's requests. A request's work does not outlive the request:
/// - every statement is cancelled by PostgreSQL after `statement_timeout`; work that streams
///   longer, the exports, lifts it for its own transaction ([`without_statement_timeout`]);
/// - a connection dropped while its statement runs, because the client went away or the request
///   timed out (the request's future is dropped, and with it the connection), does not go back
///   to the pool: it is closed, and PostgreSQL stops the statement within [`CLIENT_CHECK_MS`].
///   Without this, the pool would wait for the statement to finish before reusing the
///   connection, and the database would do work no one reads, for up to the statement timeout.
///   Telling such a connection from an idle one takes a round trip (a ping with a time limit)
///   on top of the pool's own, so it is made only for a few seconds after a request was
///   abandoned: requests that finish cost nothing more.
pub async fn connect_for_requests(
    url: &str,
    max_connections: u32,
    statement_timeout: Duration,
) -> Result<PgPool, sqlx::Error> {
    let options = PgConnectOptions::from_str(url)?;
    connect_for_requests_with(options, max_connections, statement_timeout).await
}

/// [`connect_for_requests`] with `options` (a benchmark's scratch schema).
pub async fn connect_for_requests_with(
    options: PgConnectOptions,
    max_connections: u32,
    statement_timeout: Duration,
) -> Result<PgPool, sqlx::Error> {
    use sqlx::{Connection, Executor};
    let ms = statement_timeout.as_millis().max(1).to_string();
    let options = options.options([("statement_timeout", ms.as_str())]);
    pool_options(max_connections)
        .after_connect(|conn, _| {
            Box::pin(async move {
                if conn.server_version_num().is_some_and(|v| v >= 140_000) {
                    let set = format!("set client_connection_check_interval = {CLIENT_CHECK_MS}");
                    conn.execute(set.as_str()).await?;
                }
                Ok(())
            })
        })
        .after_release(|conn, _| {
            Box::pin(async move {
                if !abandoned_recently() {
                    return Ok(true);
                }
                Ok(matches!(
                    tokio::time::timeout(RELEASE_PING, conn.ping()).await,
                    Ok(Ok(()))
                ))
            })
        })
        .connect_with(session_defaults(options))
        .await
}

/// A read-only transaction that sees one snapshot (repeatable read): for reads of several
/// statements that must agree with each other.
pub async fn read_snapshot(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("set transaction isolation level repeatable read, read only")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Lifts the statement timeout for the rest of `tx` (an export streaming a month's rows for as
/// long as its client reads them).
pub async fn without_statement_timeout(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("set local statement_timeout = 0")
        .execute(tx)
        .await
        .map(|_| ())
}

/// Applies the embedded migrations that the database has not seen yet, then every SQL function's
/// current definition ([`FUNCTIONS`]).
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await?;
    apply_functions(pool)
        .await
        .map_err(sqlx::migrate::MigrateError::Execute)
}

/// Every SQL function the database holds, by name, with its current definition: one file each in
/// `src/db/functions/`, the one place a function is read and changed. A migration creates a new
/// function (a trigger needs it there); later changes are made in its file only, which
/// [`migrate`] applies after the migrations every time (`create or replace`, so a changed
/// definition reaches every database, once). A change of a function's arguments or result type
/// needs a migration that drops the old one first.
pub const FUNCTIONS: [(&str, &str); 30] = [
    (
        "audit_log_append_only",
        include_str!("functions/audit_log_append_only.sql"),
    ),
    ("book_frozen", include_str!("functions/book_frozen.sql")),
    ("book_gpu_days", include_str!("functions/book_gpu_days.sql")),
    (
        "book_periods_not_issued",
        include_str!("functions/book_periods_not_issued.sql"),
    ),
    (
        "book_periods_writable",
        include_str!("functions/book_periods_writable.sql"),
    ),
    (
        "book_rows_inserted",
        include_str!("functions/book_rows_inserted.sql"),
    ),
    (
        "book_rows_removed",
        include_str!("functions/book_rows_removed.sql"),
    ),
    (
        "book_rows_updated",
        include_str!("functions/book_rows_updated.sql"),
    ),
    (
        "book_slice_built",
        include_str!("functions/book_slice_built.sql"),
    ),
    (
        "book_slice_days",
        include_str!("functions/book_slice_days.sql"),
    ),
    (
        "consumer_team_at",
        include_str!("functions/consumer_team_at.sql"),
    ),
    ("day_bit", include_str!("functions/day_bit.sql")),
    (
        "drop_raw_partitions_before",
        include_str!("functions/drop_raw_partitions_before.sql"),
    ),
    (
        "ensure_month_partition",
        include_str!("functions/ensure_month_partition.sql"),
    ),
    (
        "fill_team_day_rollups",
        include_str!("functions/fill_team_day_rollups.sql"),
    ),
    (
        "invoice_frozen",
        include_str!("functions/invoice_frozen.sql"),
    ),
    (
        "invoice_line_frozen",
        include_str!("functions/invoice_line_frozen.sql"),
    ),
    (
        "month_build_named",
        include_str!("functions/month_build_named.sql"),
    ),
    (
        "month_rollups_valid",
        include_str!("functions/month_rollups_valid.sql"),
    ),
    (
        "namespace_team_at",
        include_str!("functions/namespace_team_at.sql"),
    ),
    (
        "period_gpu_day",
        include_str!("functions/period_gpu_day.sql"),
    ),
    (
        "period_model_day",
        include_str!("functions/period_model_day.sql"),
    ),
    (
        "period_slice_day",
        include_str!("functions/period_slice_day.sql"),
    ),
    (
        "period_slice_keys",
        include_str!("functions/period_slice_keys.sql"),
    ),
    (
        "period_slice_sums",
        include_str!("functions/period_slice_sums.sql"),
    ),
    (
        "period_team_lines",
        include_str!("functions/period_team_lines.sql"),
    ),
    (
        "period_usage_days",
        include_str!("functions/period_usage_days.sql"),
    ),
    (
        "rate_card_immutable",
        include_str!("functions/rate_card_immutable.sql"),
    ),
    ("split_days", include_str!("functions/split_days.sql")),
    ("workload_of", include_str!("functions/workload_of.sql")),
];

/// Applies [`FUNCTIONS`] in one transaction, under a lock of its own so that two servers starting
/// at once do not replace a function under each other.
async fn apply_functions(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("select pg_advisory_xact_lock(hashtext('slicemeter functions'))")
        .execute(&mut *tx)
        .await?;
    for (_, sql) in FUNCTIONS {
        sqlx::raw_sql(sql).execute(&mut *tx).await?;
    }
    tx.commit().await
}

/// The tables ingest writes, each with a partition per month made before a batch of that month is
/// written (`occupancy`'s month made as a partition per day, so that a day's windows go into an
/// index the size of a day).
pub const PARTITIONED: [&str; 6] = [
    "occupancy",
    "gpu_presence",
    "usage_hourly",
    "gpu_hourly",
    "usage_daily",
    "gpu_daily",
];

/// Remembers which months have partitions, so a batch asks PostgreSQL only for months it has not
/// seen. Partitions are created outside any batch's transaction and one table per statement:
/// creating one locks its parent exclusively.
#[derive(Debug, Default)]
pub struct Partitions {
    known: Mutex<HashSet<NaiveDate>>,
}

impl Partitions {
    pub async fn ensure(&self, pool: &PgPool, months: &[NaiveDate]) -> Result<(), sqlx::Error> {
        for &month in months {
            if self.known.lock().expect("not poisoned").contains(&month) {
                continue;
            }
            for parent in PARTITIONED {
                sqlx::query!("select ensure_month_partition($1, $2)", parent, month)
                    .execute(pool)
                    .await?;
            }
            self.known.lock().expect("not poisoned").insert(month);
        }
        Ok(())
    }
}

/// Drops the months of raw windows and presence (`occupancy`, `gpu_presence`) before `cutoff`'s
/// month by detaching their partitions (never deleting rows); the rollups stay. Returns the
/// partitions dropped.
pub async fn drop_raw_partitions_before(
    pool: &PgPool,
    cutoff: NaiveDate,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select drop_raw_partitions_before($1) as "partition!""#,
        cutoff
    )
    .fetch_all(pool)
    .await
}

/// Whether the database answers: what `/readyz` reports.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query!("select 1 as one")
        .fetch_one(pool)
        .await
        .map(|_| ())
}
