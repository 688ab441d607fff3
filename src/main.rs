//! The `slicemeter` command: thin clap front over the library.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, NaiveDate, Utc};
use clap::{Args, Parser, Subcommand};
use serde_json::json;
use slicemeter::auth::Role;
use slicemeter::billing::BillingConfig;
use slicemeter::collector::attribution::kubeapi::KubeApi;
use slicemeter::collector::attribution::procfs::Procfs;
use slicemeter::collector::attribution::{self, Attribution, load_static_map, podresources};
use slicemeter::collector::shipper::Shipper;
use slicemeter::collector::source::Source;
use slicemeter::collector::source::nvml::real::RealNvml;
use slicemeter::collector::source::nvml::{NvmlSource, Sharing};
use slicemeter::collector::source::sim::SimSource;
use slicemeter::collector::spool::Spool;
use slicemeter::collector::{self, Cadence};
use slicemeter::db::audit::Actor;
use slicemeter::domain::team::TeamId;
use slicemeter::domain::time::Month;
use slicemeter::http::ServerConfig;
use slicemeter::ingest::Limits;
use slicemeter::reports::erp::{Layout, Platform};
use slicemeter::reports::exports::{self, ExportConfig};
use slicemeter::reports::focus::Issuer;
use slicemeter::sim::SimFleet;
use slicemeter::{bench, billing, db, demo, server, simulate};
use std::sync::Arc;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "slicemeter", version, about = "Chargeback for fractional GPUs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (applies migrations first).
    Serve(ServeArgs),
    /// Measure a node's GPUs and ship occupancy windows to a server.
    Collect(CollectArgs),
    /// Run everything on a private PostgreSQL with a month of a simulated fleet: the quick start.
    Demo(demo::DemoArgs),
    /// Apply the database migrations.
    Migrate(DbArgs),
    /// Generate a simulated fleet's batches in fast-forward, to a file or a server.
    Simulate(SimulateArgs),
    /// Create, list or revoke API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Move a GPU to another node (only that node's collector reports it from then on).
    Gpu {
        #[command(subcommand)]
        command: GpuCommand,
    },
    /// Publish rate card versions.
    RateCard {
        #[command(subcommand)]
        command: RateCardCommand,
    },
    /// Make and issue invoices.
    Invoice {
        #[command(subcommand)]
        command: InvoiceCommand,
    },
    /// Export a month for finance: FOCUS 1.0 cost data or ERP journal lines, as CSV.
    Export {
        #[command(subcommand)]
        command: ExportCommand,
    },
    /// Print the OpenAPI document the code describes.
    Openapi,
    /// Benchmarks that print figures.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Args)]
struct DbArgs {
    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Address to listen on.
    #[arg(long, env = "SLICEMETER_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    /// Largest request body, compressed or not, in bytes.
    #[arg(long, env = "SLICEMETER_BODY_LIMIT", default_value_t = 16 << 20)]
    body_limit: usize,
    /// How far in the future a batch's period may end.
    #[arg(long, env = "SLICEMETER_MAX_FUTURE_SKEW", default_value = "5m", value_parser = humantime::parse_duration)]
    max_future_skew: Duration,
    /// Longest period one batch may report on.
    #[arg(long, env = "SLICEMETER_MAX_PERIOD", default_value = "24h", value_parser = humantime::parse_duration)]
    max_period: Duration,
    /// Most windows in one batch.
    #[arg(long, env = "SLICEMETER_MAX_WINDOWS", default_value_t = 100_000)]
    max_windows: usize,
    /// Requests running longer are answered 503.
    #[arg(long, env = "SLICEMETER_REQUEST_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// Connections in the database pool.
    #[arg(long, env = "SLICEMETER_DB_MAX_CONNECTIONS", default_value_t = 16)]
    db_max_connections: u32,
    /// Ingest requests a second one token may make (0: no limit); more get 429 with Retry-After.
    #[arg(long, env = "SLICEMETER_INGEST_RATE", default_value_t = 20.0)]
    ingest_rate: f64,
    /// Ingest requests one token may make at once.
    #[arg(long, env = "SLICEMETER_INGEST_BURST", default_value_t = 40.0)]
    ingest_burst: f64,
    /// How long after a month ends its invoices wait for late data before they can be issued.
    #[arg(long, env = "SLICEMETER_ISSUE_GRACE", default_value = "1d", value_parser = humantime::parse_duration)]
    issue_grace: Duration,
    /// A connection that has not sent a whole header block in this long is closed.
    #[arg(long, env = "SLICEMETER_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    header_read_timeout: Duration,
    /// A connection on which no byte has moved for this long is closed (more than --request-timeout).
    #[arg(long, env = "SLICEMETER_IDLE_TIMEOUT", default_value = "75s", value_parser = humantime::parse_duration)]
    idle_timeout: Duration,
    #[command(flatten)]
    exports: ExportArgs,
}

#[derive(Args)]
struct ExportArgs {
    /// FOCUS BillingAccountId of every row.
    #[arg(
        long,
        env = "SLICEMETER_BILLING_ACCOUNT_ID",
        default_value = "slicemeter"
    )]
    billing_account_id: String,
    /// FOCUS BillingAccountName.
    #[arg(
        long,
        env = "SLICEMETER_BILLING_ACCOUNT_NAME",
        default_value = "GPU chargeback"
    )]
    billing_account_name: String,
    /// FOCUS InvoiceIssuerName, ProviderName and PublisherName: the team running the GPUs.
    #[arg(long, env = "SLICEMETER_ISSUER_NAME", default_value = "GPU Platform")]
    issuer_name: String,
    /// Cost center the journal credits with what teams are charged.
    #[arg(
        long,
        env = "SLICEMETER_PLATFORM_COST_CENTER",
        default_value = "GPU-PLATFORM"
    )]
    platform_cost_center: String,
    /// GL account of that credit.
    #[arg(long, env = "SLICEMETER_PLATFORM_GL_ACCOUNT", default_value = "6490")]
    platform_gl_account: String,
    /// A TOML file naming and ordering the journal's columns (see deploy/erp-layout.example.toml).
    #[arg(long, env = "SLICEMETER_ERP_LAYOUT")]
    erp_layout: Option<PathBuf>,
}

impl ExportArgs {
    fn config(&self) -> anyhow::Result<ExportConfig> {
        let erp_layout = match &self.erp_layout {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                Layout::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
            }
            None => Layout::default(),
        };
        Ok(ExportConfig {
            issuer: Issuer {
                billing_account_id: self.billing_account_id.clone(),
                billing_account_name: self.billing_account_name.clone(),
                name: self.issuer_name.clone(),
                ..Issuer::default()
            },
            platform: Platform {
                cost_center: self.platform_cost_center.clone(),
                gl_account: self.platform_gl_account.clone(),
            },
            erp_layout,
        })
    }
}

impl ServeArgs {
    fn config(&self) -> anyhow::Result<ServerConfig> {
        if self.idle_timeout <= self.request_timeout || self.header_read_timeout.is_zero() {
            bail!(
                "--idle-timeout must be longer than --request-timeout (a slow request would be cut), and --header-read-timeout above zero"
            );
        }
        let most = slicemeter::domain::batch::bounds::MAX_PERIOD_SECONDS as u64;
        if self.max_period.as_secs() > most {
            bail!(
                "--max-period is at most {} (7 days): the bounds that keep every sum exact assume it",
                humantime::format_duration(Duration::from_secs(most))
            );
        }
        Ok(ServerConfig {
            body_limit: self.body_limit,
            ingest: Limits {
                max_future_skew: chrono::Duration::from_std(self.max_future_skew)?,
                max_period: chrono::Duration::from_std(self.max_period)?,
                max_windows: self.max_windows,
            },
            request_timeout: self.request_timeout,
            exports: std::sync::Arc::new(self.exports.config()?),
            ingest_rate: self.ingest_rate,
            ingest_burst: self.ingest_burst,
            billing: BillingConfig {
                issue_grace: chrono::Duration::from_std(self.issue_grace)?,
            },
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SourceKind {
    /// A node of the deterministic simulated fleet.
    Sim,
    /// This machine's NVIDIA GPUs, through NVML.
    Nvml,
}

#[derive(Args)]
struct CadenceArgs {
    /// How often to sample.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    sample_interval: Duration,
    /// Length of an occupancy window.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    window: Duration,
}

impl CadenceArgs {
    fn cadence(&self, batch_period: Duration) -> anyhow::Result<Cadence> {
        if self.sample_interval.is_zero() || self.window < self.sample_interval {
            bail!("--window must be at least --sample-interval, and both above zero");
        }
        Ok(Cadence {
            sample_interval: self.sample_interval,
            window: self.window,
            batch_period: batch_period.max(self.window),
        })
    }
}

#[derive(Args)]
struct SimFleetArgs {
    /// Seed of the simulated fleet: the same seed gives the same fleet and figures.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// GPUs in the simulated fleet (nodes of four).
    #[arg(long, default_value_t = 16)]
    gpus: usize,
}

#[derive(Args)]
struct CollectArgs {
    /// The server, e.g. http://slicemeter:8080 (not needed with --dry-run).
    #[arg(long, env = "SLICEMETER_SERVER", required_unless_present = "dry_run")]
    server: Option<String>,
    /// A collector token for this node (not needed with --dry-run).
    #[arg(long, env = "SLICEMETER_TOKEN", hide_env_values = true, required_unless_present_any = ["dry_run", "token_file"])]
    token: Option<String>,
    /// Read the token from this file instead; `{node}` in the path is the node's name (one file per
    /// node in a mounted Secret).
    #[arg(long, env = "SLICEMETER_TOKEN_FILE", conflicts_with = "token")]
    token_file: Option<String>,
    #[arg(long, value_enum, default_value = "sim")]
    source: SourceKind,
    /// The node's name: with --source sim which simulated node to be (default gpu-node-01); with
    /// --source nvml the name to report (default: the host name).
    #[arg(long, env = "SLICEMETER_NODE")]
    node: Option<String>,
    #[command(flatten)]
    fleet: SimFleetArgs,
    #[command(flatten)]
    cadence: CadenceArgs,
    /// With --source nvml: how the device plugin shares non-MIG GPUs: none, timeslice:N or mps:N.
    #[arg(long, env = "SLICEMETER_GPU_SHARING", default_value = "none")]
    gpu_sharing: Sharing,
    /// The kubelet's PodResources socket; used when it exists.
    #[arg(long, env = "SLICEMETER_KUBELET_SOCKET", default_value = podresources::DEFAULT_SOCKET)]
    kubelet_socket: PathBuf,
    /// Read pod labels and uids from the API server with the pod's service account.
    #[arg(long, env = "SLICEMETER_KUBE_API")]
    kube_api: bool,
    /// Where /proc is (the host's, mounted, in a container without hostPID).
    #[arg(long, env = "SLICEMETER_PROC_ROOT", default_value = "/proc")]
    proc_root: PathBuf,
    /// A TOML file `[teams] "<slice or GPU uuid>" = "<team>"` for GPUs no scheduler hands out.
    #[arg(long, env = "SLICEMETER_STATIC_MAP")]
    static_map: Option<PathBuf>,
    /// Where batches wait until the server has them (fsync'd; removed only after a 2xx).
    #[arg(
        long,
        env = "SLICEMETER_SPOOL_DIR",
        default_value = "/var/lib/slicemeter/spool"
    )]
    spool_dir: PathBuf,
    /// Most bytes the spool may hold; when full, new batches are dropped (and said so).
    #[arg(long, env = "SLICEMETER_SPOOL_MAX_BYTES", default_value_t = 1 << 30)]
    spool_max_bytes: u64,
    /// Only ship what the spool holds, then exit.
    #[arg(long, conflicts_with_all = ["dry_run", "once"])]
    drain: bool,
    /// Queue the batches the server refused (in the spool's `rejected/`) again, e.g. after fixing
    /// what made it refuse them; with --drain, ship them and exit.
    #[arg(long, conflicts_with = "dry_run")]
    resend_rejected: bool,
    /// With --source sim: generate `[replay-from, replay-to)` in fast-forward instead of sampling live,
    /// spool and ship it, then exit (load and fault tests).
    #[arg(long, requires = "replay_to")]
    replay_from: Option<DateTime<Utc>>,
    #[arg(long, requires = "replay_from")]
    replay_to: Option<DateTime<Utc>>,
    /// Time one batch reports on in a replay.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    replay_batch_period: Duration,
    /// Stop after the first window.
    #[arg(long)]
    once: bool,
    /// Print the inventory and each window as JSON instead of sending them.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Args)]
struct SimulateArgs {
    #[command(flatten)]
    fleet: SimFleetArgs,
    /// Days to generate.
    #[arg(long, default_value_t = 1)]
    days: u32,
    /// First day (UTC midnight); default: `days` days before today.
    #[arg(long)]
    start: Option<NaiveDate>,
    #[command(flatten)]
    cadence: CadenceArgs,
    /// Time one batch reports on: consecutive windows are sent together.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    batch_period: Duration,
    /// Write batches as JSON lines to this file (`-` for standard output).
    #[arg(long, conflicts_with = "post", required_unless_present = "post")]
    out: Option<PathBuf>,
    /// Post batches to this server.
    #[arg(long)]
    post: Option<String>,
    /// An admin token (with --post).
    #[arg(
        long,
        env = "SLICEMETER_TOKEN",
        hide_env_values = true,
        requires = "post"
    )]
    token: Option<String>,
    /// Batches in flight at once (with --post).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token; it is printed once and only its hash is stored.
    Create {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long, value_enum)]
        role: Role,
        /// The team of a team_lead token.
        #[arg(long)]
        team: Option<String>,
        /// The node of a collector token.
        #[arg(long)]
        node: Option<String>,
        /// A note on what the token is for.
        #[arg(long)]
        label: Option<String>,
        /// Expire after this long (e.g. 90d).
        #[arg(long, value_parser = humantime::parse_duration)]
        expires_in: Option<Duration>,
    },
    /// Revoke a token by its id (the number after `smt_`).
    Revoke {
        #[command(flatten)]
        db: DbArgs,
        id: i64,
    },
    /// List tokens (never their secrets).
    List {
        #[command(flatten)]
        db: DbArgs,
    },
}

#[derive(Subcommand)]
enum GpuCommand {
    /// Register a GPU to another node, on the record (audited as `gpu.move`).
    Move {
        #[command(flatten)]
        db: DbArgs,
        /// The GPU's uuid, as NVML reports it.
        uuid: String,
        /// The node that reports it from now on.
        #[arg(long)]
        node: String,
    },
}

#[derive(Subcommand)]
enum RateCardCommand {
    /// Publish the version in a TOML file (see deploy/rate-card.example.toml).
    Load {
        #[command(flatten)]
        db: DbArgs,
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum InvoiceCommand {
    /// Make or replace the drafts of a period for every team with usage.
    Run {
        #[command(flatten)]
        db: DbArgs,
        /// The month, YYYY-MM.
        #[arg(long)]
        period: Month,
    },
    /// Issue every draft of a period in one transaction: numbers are given in team order.
    Issue {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        period: Month,
        /// How long after a month ends its invoices wait for late data.
        #[arg(long, env = "SLICEMETER_ISSUE_GRACE", default_value = "1d", value_parser = humantime::parse_duration)]
        issue_grace: Duration,
    },
}

#[derive(Subcommand)]
enum ExportCommand {
    /// FOCUS 1.0 rows of a month.
    Focus {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        period: Month,
        /// Only this team's rows.
        #[arg(long)]
        team: Option<String>,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        exports: ExportArgs,
    },
    /// Balanced journal lines of a month's issued invoices.
    Erp {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        period: Month,
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        exports: ExportArgs,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// HTTP ingest of simulated batches against a plain COPY of the same rows, in one run.
    Ingest(bench::IngestBenchArgs),
    /// An invoice run over a simulated month against one GROUP BY over the same rollups.
    Billing(bench::BillingBenchArgs),
    /// Peak memory and time of a month's FOCUS export, for fleets of several sizes.
    Export(bench::ExportBenchArgs),
    /// Many simulated collectors against one server on loopback, after a one-collector baseline.
    Load(bench::LoadBenchArgs),
}

fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_tracing();
    match Cli::parse().command {
        Command::Serve(args) => {
            let config = args.config()?;
            let pool = db::connect(&args.db.database_url, args.db_max_connections)
                .await
                .context("connecting to the database")?;
            db::migrate(&pool).await.context("applying migrations")?;
            let listener = tokio::net::TcpListener::bind(&args.listen)
                .await
                .with_context(|| format!("listening on {}", args.listen))?;
            tracing::info!(address = %listener.local_addr()?, "slicemeter is serving.");
            server::serve(pool, listener, config, server::shutdown_signal()).await?;
        }
        Command::Migrate(args) => {
            let pool = db::connect(&args.database_url, 2).await?;
            db::migrate(&pool).await?;
            println!("migrations applied");
        }
        Command::Collect(args) => collect(args).await?,
        Command::Demo(args) => demo::run(args).await?,
        Command::Simulate(args) => simulate_cmd(args).await?,
        Command::Token { command } => token(command).await?,
        Command::Gpu { command } => gpu(command).await?,
        Command::RateCard { command } => rate_card(command).await?,
        Command::Invoice { command } => invoice(command).await?,
        Command::Export { command } => export(command).await?,
        Command::Openapi => {
            println!("{}", slicemeter::http::openapi().to_pretty_json()?);
        }
        Command::Bench { command } => match command {
            BenchCommand::Ingest(args) => bench::ingest(args).await?,
            BenchCommand::Billing(args) => bench::billing(args).await?,
            BenchCommand::Export(args) => bench::export(args).await?,
            BenchCommand::Load(args) => bench::load(args).await?,
        },
    }
    Ok(())
}

async fn collect(args: CollectArgs) -> anyhow::Result<()> {
    if args.drain {
        let (shipper, spool) = shipping(&args, &host_node(&args)?)?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (_finished, finished) = tokio::sync::watch::channel(true);
        let batches = spool.len();
        let shipped = tokio::spawn(shipper.run_spool(spool.clone(), stopped, finished));
        tokio::select! {
            r = shipped => r??,
            _ = server::shutdown_signal() => { stop.send(true).ok(); }
        }
        eprintln!(
            "Shipped {} of {batches} spooled batches.",
            batches - spool.len()
        );
        return Ok(());
    }
    if args.replay_from.is_some() && !matches!(args.source, SourceKind::Sim) {
        bail!("--replay-from generates simulated time: it needs --source sim");
    }
    let cadence = args.cadence.cadence(args.cadence.window)?;
    let mut source = open_source(&args).await?;
    if args.dry_run {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "node": source.node(),
                "inventory": {"gpus": source.inventory()?.gpus, "slices": source.inventory()?.slices},
            }))?
        );
        let (tx, mut rx) = tokio::sync::mpsc::channel(10_000);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let sampling = tokio::spawn(collector::run_live(source, cadence, tx, stopped));
        let mut printed = 0;
        loop {
            tokio::select! {
                batch = rx.recv() => match batch {
                    Some(b) => {
                        println!("{}", serde_json::to_string_pretty(&b)?);
                        printed += 1;
                        if args.once && printed == 1 {
                            stop.send(true).ok();
                        }
                    }
                    None => break,
                },
                _ = server::shutdown_signal() => { stop.send(true).ok(); }
            }
        }
        sampling.await??;
        return Ok(());
    }
    let (shipper, spool) = shipping(&args, source.node())?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    if let (Some(from), Some(to)) = (args.replay_from, args.replay_to) {
        let (finished, finished_rx) = tokio::sync::watch::channel(false);
        let shipped = tokio::spawn(shipper.run_spool(spool.clone(), stopped, finished_rx));
        let cadence = args.cadence.cadence(args.replay_batch_period)?;
        let replay = tokio::task::spawn_blocking({
            let spool = spool.clone();
            move || collector::replay_into_spool(source, cadence, from, to, &spool)
        });
        tokio::select! {
            r = async {
                let windows = replay.await??;
                tracing::info!(windows, "The replay is spooled; shipping what is left.");
                finished.send(true).ok();
                shipped.await??;
                anyhow::Ok(())
            } => r?,
            _ = server::shutdown_signal() => { stop.send(true).ok(); }
        }
        return Ok(());
    }
    let running = tokio::spawn(collector::run_spooled(
        source,
        cadence,
        spool,
        shipper,
        stopped,
        Duration::from_secs(10),
    ));
    if args.once {
        // The first window closes within a window and a little; stop right after.
        tokio::select! {
            _ = tokio::time::sleep(cadence.window + cadence.sample_interval * 2) => {}
            _ = server::shutdown_signal() => {}
        }
    } else {
        server::shutdown_signal().await;
    }
    stop.send(true).ok();
    running.await??;
    Ok(())
}

/// The node a real collector reports for: `--node`, else the host's name.
fn host_node(args: &CollectArgs) -> anyhow::Result<String> {
    Ok(match &args.node {
        Some(n) => n.clone(),
        None => nix::unistd::gethostname()?.to_string_lossy().into_owned(),
    })
}

/// The collector's source: the simulator, or NVML with its holders' attribution.
async fn open_source(args: &CollectArgs) -> anyhow::Result<Box<dyn Source>> {
    Ok(match args.source {
        SourceKind::Sim => Box::new(SimSource::new(
            SimFleet::generate(args.fleet.seed, args.fleet.gpus),
            args.node.as_deref().unwrap_or("gpu-node-01"),
        )?),
        SourceKind::Nvml => {
            let api = RealNvml::init()?;
            let node = host_node(args)?;
            let mut attribution = Attribution {
                procfs: Procfs {
                    root: args.proc_root.clone(),
                },
                ..Attribution::default()
            };
            if let Some(map) = &args.static_map {
                attribution.static_map = load_static_map(map).map_err(|e| anyhow::anyhow!(e))?;
            }
            if args.kubelet_socket.exists() {
                let api = if args.kube_api {
                    Some(KubeApi::in_cluster(&node)?)
                } else {
                    None
                };
                let (snapshot, _task) =
                    attribution::watch(args.kubelet_socket.clone(), api, Duration::from_secs(5));
                // Attribute the first windows too: wait a little for the first listing.
                for _ in 0..50 {
                    if snapshot.read().expect("not poisoned").is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                attribution.kubelet = Some(snapshot);
            } else {
                tracing::info!(socket = %args.kubelet_socket.display(), "No kubelet here: holders are processes' units, containers or users.");
            }
            Box::new(NvmlSource::new(api, attribution, &node, args.gpu_sharing))
        }
    })
}

/// The shipper and the spool of node `node`'s collector.
fn shipping(args: &CollectArgs, node: &str) -> anyhow::Result<(Shipper, Arc<Spool>)> {
    let token = match (&args.token, &args.token_file) {
        (Some(t), _) => t.clone(),
        (None, Some(path)) => {
            let path = path.replace("{node}", node);
            std::fs::read_to_string(&path)
                .with_context(|| format!("reading the collector token from {path}"))?
                .trim()
                .to_owned()
        }
        (None, None) => bail!("--token or --token-file is required"),
    };
    let shipper = Shipper::new(
        args.server.as_deref().context("--server is required")?,
        &token,
    )?;
    let spool = Spool::open(&args.spool_dir, args.spool_max_bytes)?;
    if args.resend_rejected {
        let n = spool.requeue_rejected()?;
        tracing::info!(batches = n, "Batches set aside before are queued again.");
        eprintln!("{n} set-aside batches queued again.");
    }
    Ok((shipper, Arc::new(spool)))
}

async fn simulate_cmd(args: SimulateArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let cadence = args.cadence.cadence(args.batch_period)?;
    let fleet = SimFleet::generate(args.fleet.seed, args.fleet.gpus);
    let start = match args.start {
        Some(d) => slicemeter::domain::time::start_of(d),
        None => {
            slicemeter::domain::time::start_of(Utc::now().date_naive())
                - chrono::Duration::days(i64::from(args.days))
        }
    };
    let end = start + chrono::Duration::days(i64::from(args.days));
    let bar = simulate::progress(
        simulate::expected_batches(&fleet, start, end, cadence.batch_period),
        "simulating",
    );
    let started = std::time::Instant::now();
    if let Some(out) = &args.out {
        let writer: Box<dyn Write> = if out.as_os_str() == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(
                std::fs::File::create(out)
                    .with_context(|| format!("creating {}", out.display()))?,
            )
        };
        let mut writer = std::io::BufWriter::with_capacity(1 << 20, writer);
        let mut failed = None;
        let mut windows = 0u64;
        simulate::generate(&fleet, start, end, cadence, |day| {
            for b in &day {
                windows += b.windows.len() as u64;
                if let Err(e) = serde_json::to_writer(&mut writer, b)
                    .map_err(std::io::Error::from)
                    .and_then(|_| writer.write_all(b"\n"))
                {
                    failed = Some(e);
                    return false;
                }
            }
            bar.inc(day.len() as u64);
            true
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        writer.flush()?;
        bar.finish_and_clear();
        eprintln!(
            "{} windows of {} GPUs over {} days written in {:.1} s",
            windows,
            args.fleet.gpus,
            args.days,
            started.elapsed().as_secs_f64()
        );
    } else if let Some(server) = &args.post {
        let token = args
            .token
            .as_deref()
            .context("--post needs --token (an admin token)")?;
        let shipper = Shipper::new(server, token)?;
        let totals = simulate::generate_and_ingest(
            fleet,
            start,
            end,
            cadence,
            args.concurrency.max(1),
            bar,
            |b| {
                let shipper = shipper.clone();
                async move { shipper.send_with_retry(&b).await }
            },
        )
        .await?;
        eprintln!(
            "{} batches posted: {} windows new, {} already stored, in {:.1} s",
            totals.batches,
            totals.inserted,
            totals.duplicates,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

async fn token(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create {
            db,
            role,
            team,
            node,
            label,
            expires_in,
        } => {
            let pool = db::connect(&db.database_url, 2).await?;
            db::migrate(&pool).await?;
            let team = team.as_deref().map(TeamId::parse).transpose()?;
            let expires_at: Option<DateTime<Utc>> = expires_in
                .map(|d| chrono::Duration::from_std(d).map(|d| Utc::now() + d))
                .transpose()?;
            let (id, token) = db::tokens::create(
                &pool,
                role,
                team.as_ref(),
                node.as_deref(),
                label.as_deref(),
                expires_at,
                &Actor::CLI,
            )
            .await?;
            eprintln!("token {id} ({role}) created; it is shown once:");
            println!("{token}");
        }
        TokenCommand::Revoke { db, id } => {
            let pool = db::connect(&db.database_url, 2).await?;
            if db::tokens::revoke(&pool, id, &Actor::CLI).await? {
                println!("token {id} revoked");
            } else {
                bail!("there is no unrevoked token {id}");
            }
        }
        TokenCommand::List { db } => {
            let pool = db::connect(&db.database_url, 2).await?;
            println!("id\trole\tteam\tnode\tcreated\texpires\trevoked\tlabel");
            for t in db::tokens::list(&pool).await? {
                let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    t.id,
                    t.role,
                    opt(t.team_id),
                    opt(t.node),
                    t.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
                    opt(t.expires_at.map(|e| e.to_rfc3339())),
                    opt(t.revoked_at.map(|e| e.to_rfc3339())),
                    opt(t.label)
                );
            }
        }
    }
    Ok(())
}

async fn gpu(command: GpuCommand) -> anyhow::Result<()> {
    match command {
        GpuCommand::Move { db, uuid, node } => {
            if !slicemeter::domain::batch::is_node_name(&node) {
                bail!("{node:?} is not a node name: use 1 to 253 letters, digits, '.', '-' or '_'");
            }
            let pool = db::connect(&db.database_url, 2).await?;
            db::migrate(&pool).await?;
            match db::fleet::move_gpu(&pool, &uuid, &node, &Actor::CLI).await? {
                Some(g) => println!("{} now belongs to node {}", g.gpu_uuid, g.node),
                None => bail!("there is no GPU {uuid}"),
            }
        }
    }
    Ok(())
}

async fn rate_card(command: RateCardCommand) -> anyhow::Result<()> {
    match command {
        RateCardCommand::Load { db, file } => {
            let pool = db::connect(&db.database_url, 2).await?;
            db::migrate(&pool).await?;
            let id = billing::rate_card::load(&pool, &file).await?;
            println!("rate card version {id} published from {}", file.display());
        }
    }
    Ok(())
}

async fn invoice(command: InvoiceCommand) -> anyhow::Result<()> {
    match command {
        InvoiceCommand::Run { db, period } => {
            let pool = db::connect(&db.database_url, 4).await?;
            db::migrate(&pool).await?;
            let run = billing::run_drafts(&pool, period, Utc::now(), &Actor::CLI).await?;
            println!("id\tteam\tperiod\tstatus\ttotal\tcurrency\tlines");
            for i in &run.drafts {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    i.id,
                    i.team,
                    i.period,
                    i.status,
                    i.total,
                    i.currency,
                    i.lines.len()
                );
            }
            for team in &run.already_issued {
                eprintln!(
                    "{team}: the invoice for {period} is already issued; changes go to its next invoice"
                );
            }
        }
        InvoiceCommand::Issue {
            db,
            period,
            issue_grace,
        } => {
            let pool = db::connect(&db.database_url, 4).await?;
            db::migrate(&pool).await?;
            let config = BillingConfig {
                issue_grace: chrono::Duration::from_std(issue_grace)?,
            };
            let issued =
                billing::issue_period(&pool, period, Utc::now(), &config, &Actor::CLI).await?;
            for issued in issued {
                println!(
                    "{}\t{}\t{}\t{} {}",
                    issued.number.unwrap_or_default(),
                    issued.team,
                    issued.period,
                    issued.total,
                    issued.currency
                );
            }
        }
    }
    Ok(())
}

fn output(out: Option<&PathBuf>) -> anyhow::Result<Box<dyn std::io::Write + Send>> {
    Ok(match out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::stdout()),
    })
}

async fn export(command: ExportCommand) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    match command {
        ExportCommand::Focus {
            db,
            period,
            team,
            out,
            exports,
        } => {
            let pool = db::connect(&db.database_url, 4).await?;
            let team = team.as_deref().map(TeamId::parse).transpose()?;
            let mut stream = Box::pin(
                exports::focus(&pool, period, team, std::sync::Arc::new(exports.config()?)).await?,
            );
            let mut sink = output(out.as_ref())?;
            while let Some(chunk) = stream.next().await {
                sink.write_all(&chunk?)?;
            }
            sink.flush()?;
        }
        ExportCommand::Erp {
            db,
            period,
            out,
            exports,
        } => {
            let pool = db::connect(&db.database_url, 2).await?;
            let csv = exports::erp(&pool, period, &exports.config()?).await?;
            let mut sink = output(out.as_ref())?;
            sink.write_all(&csv)?;
            sink.flush()?;
        }
    }
    Ok(())
}
