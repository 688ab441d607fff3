//! What the benchmarks share: a scratch schema per run, a month of a simulated fleet loaded through
//! ingest, percentiles, and peak memory of a process.

use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use slicemeter::auth::store as tokens;
use slicemeter::background::{self, Background};
use slicemeter::billing::rate_card::RateCardInput;
use slicemeter::billing::service as billing;
use slicemeter::cli::demo::register_teams;
use slicemeter::collector::Cadence;
use slicemeter::db;
use slicemeter::db::cluster::PrivateCluster;
use slicemeter::domain::access::{Actor, Role};
use slicemeter::domain::time::Month;
use slicemeter::http::server;
use slicemeter::http::state::{AppState, ServerConfig};
use slicemeter::ingest::group::GroupCommit;
use slicemeter::ingest::service::Ingestor;
use slicemeter::ingest::validate::Limits;
use slicemeter::sim::{SimFleet, generate};
use sqlx::postgres::PgConnectOptions;

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Runs `body` on a pool confined to a scratch schema, which is dropped afterwards. `body` also
/// gets a connection URL confined to that schema, for a process of its own. Without a `url`, a
/// private PostgreSQL is started for the run (as `demo` does) and stopped after it.
pub async fn in_scratch_schema<F, Fut>(
    url: Option<&str>,
    connections: u32,
    body: F,
) -> anyhow::Result<()>
where
    F: FnOnce(sqlx::PgPool, String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let Some(url) = url else {
        let root = PrivateCluster::default_root("bench");
        eprintln!(
            "DATABASE_URL is unset: starting a private PostgreSQL in {} ...",
            root.display()
        );
        let cluster = tokio::task::spawn_blocking(move || PrivateCluster::start(&root)).await??;
        let result = Box::pin(in_scratch_schema(
            Some(&cluster.url("postgres")),
            connections,
            body,
        ))
        .await;
        tokio::task::spawn_blocking(move || cluster.stop()).await??;
        return result;
    };
    // One per call: a run that keeps its schemas (`SLICEMETER_BENCH_KEEP`) makes several.
    static SCHEMAS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SCHEMAS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let schema = format!("slicemeter_bench_{}_{n}", std::process::id());
    let admin = db::connect(url, 2).await?;
    sqlx::query(&format!("create schema {schema}"))
        .execute(&admin)
        .await?;
    let options = PgConnectOptions::from_str(url)?.options([("search_path", schema.as_str())]);
    let sep = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    let result = async {
        let pool = db::connect_with(options, connections).await?;
        db::migrate(&pool).await?;
        body(pool, scoped).await
    }
    .await;
    // SLICEMETER_BENCH_KEEP=1 leaves the schema for a look at the plans (`set search_path`).
    if std::env::var_os("SLICEMETER_BENCH_KEEP").is_some() {
        eprintln!("kept the scratch schema {schema}");
    } else {
        sqlx::query(&format!("drop schema {schema} cascade"))
            .execute(&admin)
            .await
            .context("dropping the scratch schema")?;
    }
    result
}

/// Loads `month` of a simulated fleet of `gpus` GPUs (teams, hourly windows sampled every five
/// minutes, a day a batch) straight through ingest, with the example rate card in force. Returns
/// the number of rollup rows.
pub async fn load_month(
    pool: &sqlx::PgPool,
    gpus: usize,
    seed: u64,
    month: Month,
) -> anyhow::Result<i64> {
    publish_example_card(pool, month).await?;
    let fleet = SimFleet::generate(seed, gpus);
    register_teams(pool, &fleet).await?;
    let cadence = Cadence {
        sample_interval: Duration::from_secs(300),
        window: Duration::from_secs(3600),
        batch_period: Duration::from_secs(86_400),
    };
    let started = Instant::now();
    let ingestor = Ingestor::new(
        pool.clone(),
        std::sync::Arc::new(db::Partitions::default()),
        GroupCommit::default(),
    );
    let limits = Limits::default();
    let bar = generate::progress(
        generate::expected_batches(&fleet, month.start(), month.end(), cadence.batch_period),
        "loading a month",
    );
    let totals =
        generate::generate_and_ingest(fleet, month.start(), month.end(), cadence, 2, bar, |b| {
            let (ingestor, limits) = (&ingestor, &limits);
            async move { ingestor.ingest(b, Utc::now(), limits).await }
        })
        .await?;
    sqlx::query("analyze").execute(pool).await?;
    let rollup_rows: i64 = sqlx::query_scalar("select count(*) from usage_hourly")
        .fetch_one(pool)
        .await?;
    eprintln!(
        "loaded {gpus} GPUs, {month}: {} windows, {rollup_rows} rollup rows, in {:.1} s",
        totals.inserted,
        started.elapsed().as_secs_f64()
    );
    Ok(rollup_rows)
}

/// Publishes the example rate card (`deploy/rate-card.example.toml`) in force from `month`'s start.
pub async fn publish_example_card(pool: &sqlx::PgPool, month: Month) -> anyhow::Result<()> {
    let mut card: RateCardInput =
        toml::from_str(include_str!("../../../deploy/rate-card.example.toml"))?;
    card.effective_from = month.start();
    let card = card
        .validate(chrono::Utc::now())
        .map_err(|e| anyhow::anyhow!("example rate card: {e:?}"))?;
    billing::publish_rate_card(pool, &card, &Actor::CLI).await?;
    Ok(())
}

/// The floor a month's reading is measured against: one `GROUP BY team` over the month's hourly
/// rollups, weighing each row by its slice's shares (reading the data once). Run twice, the second
/// timed, so that it reads warm caches; the teams it found and its time.
pub async fn group_by_floor(
    pool: &sqlx::PgPool,
    month: Month,
) -> anyhow::Result<(usize, Duration)> {
    let floor = || async {
        sqlx::query(
            "select u.team_id, sum(u.held_seconds * s.compute_share), sum(u.held_seconds * s.memory_share)
             from usage_hourly u join slice s using (slice_id)
             where u.hour >= $1 and u.hour < $2 group by u.team_id",
        )
        .bind(month.start())
        .bind(month.end())
        .fetch_all(pool)
        .await
    };
    floor().await?;
    let t = Instant::now();
    let teams = floor().await?.len();
    Ok((teams, t.elapsed()))
}

pub use slicemeter::process::peak_rss_kib;

pub fn tempfile_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("slicemeter-bench-{}-{name}", std::process::id()))
}

/// The real server (`http::server::serve`) on a loopback port, as a benchmark's clients reach it.
pub struct Loopback {
    /// `http://127.0.0.1:<port>`
    pub base: String,
    stop: tokio::sync::watch::Sender<bool>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    background: Background,
    requests: sqlx::PgPool,
}

impl Loopback {
    pub async fn start(pool: &sqlx::PgPool, config: ServerConfig) -> anyhow::Result<Loopback> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        // The server's own kind of pool (`serve`'s): statement timeout, connections dropped
        // mid-statement closed.
        let requests = slicemeter::db::connect_for_requests_with(
            pool.connect_options().as_ref().clone(),
            pool.options().get_max_connections(),
            config.statement_timeout(),
        )
        .await?;
        let state = AppState::new(requests.clone(), config);
        let background = background::start(state.background());
        let serving = tokio::spawn(server::serve(state, listener, async move {
            let _ = stopped.changed().await;
        }));
        Ok(Loopback {
            base,
            stop,
            serving,
            background,
            requests,
        })
    }

    /// Stops the server once its requests in flight are answered and the reads it runs behind
    /// them (kept reads read anew) are done: what the benchmark does next, dropping its schema
    /// among others, meets none of its statements.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop.send(true).ok();
        self.serving.await??;
        self.background.stop(Duration::from_secs(30)).await;
        self.requests.close().await;
        Ok(())
    }
}

/// A new admin token, for a benchmark's client.
pub async fn admin_token(pool: &sqlx::PgPool) -> anyhow::Result<String> {
    let (_, token) = tokens::create(
        pool,
        Role::Admin,
        None,
        None,
        Some("bench"),
        None,
        &Actor::CLI,
    )
    .await?;
    Ok(token)
}
