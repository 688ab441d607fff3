//! PostgreSQL: the pool, the embedded migrations, monthly partitions, the SQL mapping of text-valued
//! types (`types`) and the private cluster `demo` and the tests start (`cluster`). It imports nothing
//! of the features above it; each feature keeps its own SQL in its `store.rs`.

pub mod cache;
pub mod cluster;
pub mod types;

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use chrono::NaiveDate;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Connects a pool to `url`. With `search_path` the pool works inside that schema only (the ingest
/// benchmark's scratch schema).
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    connect_with(PgConnectOptions::from_str(url)?, max_connections).await
}

pub async fn connect_with(
    options: PgConnectOptions,
    max_connections: u32,
) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        // While the database is away, requests fail fast with 503 rather than queue.
        .acquire_timeout(Duration::from_secs(5))
        // PostgreSQL's JIT compiles the reports' wide aggregations for longer than it saves:
        // measured at 2,000 GPUs, the month's usage by day took 3.9 s with it and 3.3 s without.
        .connect_with(
            options
                .application_name("slicemeter")
                .options([("jit", "off")]),
        )
        .await
}

/// A pool for the server's requests: every statement is cancelled by PostgreSQL after
/// `statement_timeout`, so a query whose request was cut off (or whose client went away) does not
/// keep running. Work that streams longer, the exports, lifts it for its own transaction
/// ([`without_statement_timeout`]).
pub async fn connect_for_requests(
    url: &str,
    max_connections: u32,
    statement_timeout: Duration,
) -> Result<PgPool, sqlx::Error> {
    let ms = statement_timeout.as_millis().max(1).to_string();
    let options = PgConnectOptions::from_str(url)?.options([("statement_timeout", ms.as_str())]);
    connect_with(options, max_connections).await
}

/// Lifts the statement timeout for the rest of `tx` (an export streaming a month's rows for as
/// long as its client reads them).
pub async fn without_statement_timeout(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("set local statement_timeout = 0")
        .execute(tx)
        .await
        .map(|_| ())
}

/// Applies the embedded migrations that the database has not seen yet.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// The tables ingest writes, each with a partition per month made before a batch of that month is
/// written (`occupancy`'s month made of a partition per day, so that a day's windows go into an
/// index the size of a day). The books' `book_slice_day` is partitioned by month too; the invoice run makes its
/// month's partition (`billing::store::books_partition`).
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
