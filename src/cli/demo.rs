//! `slicemeter demo`: the zero-configuration main job. Without `DATABASE_URL` it runs a private
//! PostgreSQL in a folder of its own, back-fills the last days of a simulated fleet, keeps live
//! simulated collectors running, and serves the API until Ctrl-C, then stops its PostgreSQL.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::alerts::{AlertConfig, Secret};
use crate::auth::store as tokens;
use crate::background;
use crate::billing::rate_card::{RateCardInput, store as rate_cards};
use crate::billing::service::{self as billing, BillingConfig};
use crate::collector::Cadence;
use crate::collector::import::prometheus::Auth;
use crate::collector::run::run_spooled;
use crate::collector::shipper::Shipper;
use crate::collector::spool::Spool;
use crate::db::cluster::{self, PrivateCluster};
use crate::db::{self, Partitions};
use crate::domain::access::{Actor, Role};
use crate::domain::ownership;
use crate::domain::team::TeamId;
use crate::domain::time::{Month, floor_to};
use crate::fleet::store as fleet_store;
use crate::http::server;
use crate::http::state::{AppState, ServerConfig};
use crate::ingest::group::GroupCommit;
use crate::ingest::service::Ingestor;
use crate::ingest::validate::Limits;
use crate::process;
use crate::sim::source::SimSource;
use crate::sim::{SimFleet, generate};
use crate::teams::{self, TeamUpdate};
use crate::units::{self, service::UnitSource};

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Use this database instead of a private PostgreSQL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Where the private PostgreSQL keeps its data (reused by the next demo; one demo a folder at
    /// a time: a second refuses it).
    #[arg(long, env = "SLICEMETER_DEMO_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address to serve on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// GPUs in the simulated fleet.
    #[arg(long, default_value_t = 16)]
    pub gpus: usize,
    /// Seed of the simulated fleet.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Days of history to back-fill (31: last month always has some, to invoice).
    #[arg(long, default_value_t = 31)]
    pub days: u32,
    /// Window length of the back-fill (coarser than live windows, so it is quick).
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub backfill_window: Duration,
    /// Sample interval of the back-fill.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub backfill_sample_interval: Duration,
    /// Do not run live collectors after the back-fill.
    #[arg(long)]
    pub no_live: bool,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let mut cluster = None;
    // The demo's folder (the live collectors' spools, the files that tell the CLI how to reach it):
    // the private cluster's, else one in the temporary folder.
    let mut demo_dir = std::env::temp_dir().join("slicemeter-demo");
    let mut _one_demo = None;
    let url = match &args.database_url {
        Some(url) => url.clone(),
        None => {
            let root = args
                .data_dir
                .clone()
                .unwrap_or_else(|| PrivateCluster::default_root("demo"));
            demo_dir = root.clone();
            _one_demo = Some(one_demo_in(&root)?);
            eprintln!("Starting a private PostgreSQL in {} ...", root.display());
            let c = tokio::task::spawn_blocking(move || PrivateCluster::start(&root)).await??;
            cluster::ensure_database(&c.url("postgres"), "slicemeter").await?;
            let url = c.url("slicemeter");
            cluster = Some(c);
            url
        }
    };
    let result = run_on(&args, &url, &demo_dir).await;
    if let Some(c) = cluster {
        eprintln!("Stopping the private PostgreSQL ...");
        tokio::task::spawn_blocking(move || c.stop()).await??;
    }
    result
}

/// The folder's lock, held while the demo runs: a second demo on the folder would write its
/// back-fill into the first's database and, stopping, stop that database under it.
fn one_demo_in(root: &Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    use nix::fcntl::{Flock, FlockArg};
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let path = root.join("demo.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => anyhow::bail!(
            "another slicemeter demo is running in {}: stop it first (Ctrl-C), or give this one \
             another folder with --data-dir",
            root.display()
        ),
        Err((_, e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

async fn run_on(args: &DemoArgs, url: &str, demo_dir: &Path) -> anyhow::Result<()> {
    let spool_root = demo_dir.join("spool");
    let pool = db::connect(url, 12)
        .await
        .context("connecting to the database")?;
    db::migrate(&pool).await.context("applying migrations")?;
    let fleet = SimFleet::generate(args.seed, args.gpus);
    register_teams(&pool, &fleet).await?;
    publish_example_rate_card(&pool, args.days).await?;
    backfill(args, &pool, &fleet).await?;
    // Drafts for last month, so that there are invoices to look at.
    let last_month = Month::of(Utc::now()).minus(1);
    match billing::run_drafts(&pool, last_month, Utc::now(), &Actor::CLI).await {
        Ok(run) => eprintln!("Drafted {} invoices for {last_month}.", run.drafts.len()),
        Err(e) => eprintln!("No invoices drafted for {last_month}: {e}"),
    }

    let units = units_source(&pool, &fleet).await?;

    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| {
            format!(
                "listening on {} (choose another with --listen)",
                args.listen
            )
        })?;
    let address: SocketAddr = listener.local_addr()?;
    let base = format!("http://{address}");
    let (admin_id, admin) = tokens::create(
        &pool,
        Role::Admin,
        None,
        None,
        Some("demo admin"),
        None,
        &Actor::CLI,
    )
    .await?;

    // A signing key for webhook alerts, kept in the folder (mode 0600) so that a receiver can
    // verify what the demo sends (docs/reports.md, Alerts).
    let key_file = demo_dir.join("alert-signing-key");
    let signing_key: String = {
        use rand::Rng;
        let mut rng = rand::rng();
        (0..32)
            .map(|_| format!("{:02x}", rng.random::<u8>()))
            .collect()
    };
    write_private(&key_file, &signing_key)?;

    // Collectors stop first, so that their last windows still reach the server.
    let (stop_collectors, collectors_stopped) = watch::channel(false);
    let (stop_server, mut server_stopped) = watch::channel(false);
    // The back-fill is complete when the demo starts: its last month need not wait for late data.
    let config = ServerConfig {
        billing: BillingConfig {
            issue_grace: chrono::Duration::zero(),
        },
        // On loopback: the billing gauges a local Prometheus and Grafana would chart.
        metrics_billing: true,
        units_prometheus: Some(units.clone()),
        alerts: AlertConfig {
            interval: Duration::from_secs(60),
            signing_key: Some(Secret(signing_key.into_bytes())),
            public_url: base.clone(),
            ..AlertConfig::default()
        },
        ..ServerConfig::default()
    };
    let request_timeout = config.request_timeout;
    let state = AppState::new(pool.clone(), config);
    let background = background::start(state.background());
    let mut serving = tokio::spawn(server::serve(state, listener, async move {
        let _ = server_stopped.changed().await;
    }));
    let mut collectors = Vec::new();
    if !args.no_live {
        for node in &fleet.nodes {
            let (_, token) = tokens::create(
                &pool,
                Role::Collector,
                None,
                Some(&node.name),
                Some("demo collector"),
                None,
                &Actor::CLI,
            )
            .await?;
            let shipper = Shipper::new(&base, &token)?;
            let spool = Arc::new(Spool::open(&spool_root.join(&node.name), 64 << 20)?);
            let source = SimSource::new(&fleet, &node.name)?;
            let cadence = Cadence {
                sample_interval: Duration::from_secs(5),
                window: Duration::from_secs(60),
                batch_period: Duration::from_secs(60),
            };
            let stopped = collectors_stopped.clone();
            collectors.push(tokio::spawn(async move {
                let grace = Duration::from_secs(10);
                if let Err(e) = run_spooled(source, cadence, spool, shipper, stopped, grace).await {
                    tracing::error!(error = %e, "A demo collector stopped.");
                }
            }));
        }
    }
    // For the CLI against this demo (`slicemeter token create --database-url "$(cat …)"`): readable
    // by this user only.
    let url_file = demo_dir.join("database-url");
    let token_file = demo_dir.join("admin-token");
    write_private(&url_file, url)?;
    write_private(&token_file, &admin)?;
    println!("slicemeter demo is serving at {base}/");
    println!("admin token (id {admin_id}, shown once): {admin}");
    println!(
        "database URL in {} and admin token in {} (mode 0600), for the CLI: slicemeter token list --database-url \"$(cat {})\"",
        url_file.display(),
        token_file.display(),
        url_file.display()
    );
    println!(
        "webhook alerts are signed with the key in {} (docs/reports.md, Alerts)",
        key_file.display()
    );
    print_what_to_try(&base, &admin, args.days, &units.url);

    let served = tokio::select! {
        _ = process::shutdown_signal() => None,
        r = &mut serving => Some(r),
    };
    stop_collectors.send(true).ok();
    let drained = futures_util::future::join_all(collectors);
    if tokio::time::timeout(Duration::from_secs(15), drained)
        .await
        .is_err()
    {
        tracing::warn!("The demo collectors had unsent windows after 15 s; they are dropped.");
    }
    stop_server.send(true).ok();
    let served = match served {
        Some(r) => r,
        None => serving.await,
    };
    background.stop(request_timeout).await;
    pool.close().await;
    served?.context("serving")
}

/// The simulated fleet's teams, with their namespaces (owned from the beginning of data, so that
/// the back-filled month is theirs), cost centers and GL accounts.
pub async fn register_teams(pool: &PgPool, fleet: &SimFleet) -> anyhow::Result<()> {
    for t in &fleet.teams {
        teams::put(
            pool,
            &TeamId::parse(&t.id)?,
            TeamUpdate {
                display_name: Some(&t.display_name),
                cost_center: Some(Some(&t.cost_center)),
                gl_account: Some(Some("6420")),
                namespaces: Some(&t.namespaces),
                effective_from: Some(ownership::beginning()),
                reason: Some("the demo's simulated teams"),
            },
            &Actor::CLI,
        )
        .await?;
    }
    Ok(())
}

/// The example rate card, published once (from the start of the back-filled month) so that the
/// demo's usage has prices.
async fn publish_example_rate_card(pool: &PgPool, days: u32) -> anyhow::Result<()> {
    if !rate_cards::rate_cards(pool).await?.is_empty() {
        return Ok(());
    }
    let mut input: RateCardInput = toml::from_str(EXAMPLE_RATE_CARD)?;
    let oldest = Month::of(Utc::now() - chrono::Duration::days(i64::from(days))).start();
    input.effective_from = input.effective_from.min(oldest);
    let card = input
        .validate(Utc::now())
        .map_err(|e| anyhow::anyhow!("the example rate card is invalid: {e:?}"))?;
    let id = billing::publish_rate_card(pool, &card, &Actor::CLI).await?;
    eprintln!("Published the example rate card (deploy/rate-card.example.toml) as version {id}.");
    Ok(())
}

/// Where to look first: the dashboard, the usage report, the unit cost and the API document.
fn print_what_to_try(base: &str, admin: &str, days: u32, units_url: &str) {
    println!("dashboard: {base}/ui/ (sign in with the token above)");
    println!(
        "try: curl -H 'Authorization: Bearer {admin}' '{base}/v1/reports/usage?from={}&to={}&group_by=team,namespace,workload&step=month'",
        (Utc::now() - chrono::Duration::days(i64::from(days))).date_naive(),
        (Utc::now() + chrono::Duration::days(1)).date_naive()
    );
    println!(
        "cost per million generated tokens (simulated vLLM counters at {units_url}/metrics): curl -H 'Authorization: Bearer {admin}' '{base}/v1/reports/unit-cost?from={}&to={}&unit=generated_tokens&group_by=team,model'",
        (Utc::now() - chrono::Duration::days(1)).date_naive(),
        Utc::now().date_naive()
    );
    println!("API document: {base}/openapi.json; press Ctrl-C to stop.");
}

/// The unit cost from the first minute: a simulated vLLM's counters for the chat pods, served by
/// a stand-in for Prometheus of the demo's own, and the ready-made `generated_tokens` unit (vLLM's
/// generated tokens) unless one is defined.
async fn units_source(pool: &PgPool, fleet: &SimFleet) -> anyhow::Result<UnitSource> {
    let url = super::demo_prometheus::start(fleet.clone()).await?;
    if units::store::get(pool, "generated_tokens").await?.is_none() {
        let def = units::presets()
            .into_iter()
            .find(|p| p.name == "generated_tokens")
            .context("the ready-made generated_tokens unit")?;
        units::store::put(pool, &def, &Actor::CLI).await?;
    }
    Ok(UnitSource {
        url,
        auth: Auth::None,
        timeout: Duration::from_secs(30),
        max_answer_bytes: 256 << 20,
        // The demo's Prometheus answers the query API only: remote read finds nothing there.
        remote_read: true,
    })
}

const EXAMPLE_RATE_CARD: &str = include_str!("../../deploy/rate-card.example.toml");

/// Back-fills from the last stored hour (or `days` ago) up to now, in coarse windows, straight into
/// ingest. A second demo only adds the time since the first.
async fn backfill(args: &DemoArgs, pool: &PgPool, fleet: &SimFleet) -> anyhow::Result<()> {
    let cadence = Cadence {
        sample_interval: args.backfill_sample_interval,
        window: args.backfill_window,
        batch_period: Duration::from_secs(6 * 3600),
    };
    let step = chrono::Duration::from_std(args.backfill_window)?;
    let now = Utc::now();
    let to = floor_to(now, step);
    let oldest = floor_to(now - chrono::Duration::days(i64::from(args.days)), step);
    let last = fleet_store::last_presence(pool).await?;
    let from = last.map_or(oldest, |l| l.max(oldest));
    if from >= to {
        return Ok(());
    }
    let bar = generate::progress(
        generate::expected_batches(fleet, from, to, cadence.batch_period),
        "back-filling",
    );
    eprintln!("Back-filling {} GPUs from {from} to {to} ...", args.gpus);
    let ingestor = Ingestor::new(
        pool.clone(),
        Arc::new(Partitions::default()),
        GroupCommit::default(),
    );
    let limits = Limits::default();
    let started = std::time::Instant::now();
    let totals = generate::generate_and_ingest(fleet.clone(), from, to, cadence, 4, bar, |batch| {
        let (ingestor, limits) = (&ingestor, &limits);
        async move { ingestor.ingest(batch, Utc::now(), limits).await }
    })
    .await?;
    eprintln!(
        "Back-filled {} windows in {} batches in {:.1} s.",
        totals.inserted,
        totals.batches,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Writes `text` to `path`, readable and writable by this user only (0600), whatever was there.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    writeln!(f, "{text}")?;
    Ok(())
}
