//! `slicemeter collect`: its flags, mapped onto the collector's modes (`collector::run`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::Args;

use super::args::{CadenceArgs, SimFleetArgs};
use crate::collector::attribution::podresources;
use crate::collector::run::{self, NvmlOptions, Shipping, Token};
use crate::collector::source::Source;
use crate::collector::source::dcgm::{DcgmOptions, DcgmSource};
use crate::collector::source::nvml::Sharing;
use crate::process;
use crate::sim::source::SimSource;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceKind {
    /// A node of the deterministic simulated fleet.
    Sim,
    /// This machine's NVIDIA GPUs, through NVML.
    Nvml,
    /// The node's NVIDIA dcgm-exporter page (`--dcgm-url`): no NVML access, no privileges.
    Dcgm,
}

#[derive(Args)]
pub struct CollectArgs {
    /// The server, e.g. http://slicemeter:8080 (not needed with --dry-run).
    #[arg(long, env = "SLICEMETER_SERVER", required_unless_present = "dry_run")]
    pub server: Option<String>,
    /// A collector token for this node (not needed with --dry-run).
    #[arg(long, env = "SLICEMETER_TOKEN", hide_env_values = true, required_unless_present_any = ["dry_run", "token_file"])]
    pub token: Option<String>,
    /// Read the token from this file instead; `{node}` in the path is the node's name (one file per
    /// node in a mounted Secret).
    #[arg(long, env = "SLICEMETER_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<String>,
    /// Where the readings come from.
    #[arg(long, value_enum, default_value = "sim")]
    pub source: SourceKind,
    /// The node's name: with --source sim which simulated node to be (default its first,
    /// `<node-prefix>-01`); with --source nvml or dcgm the name to report (default: the host
    /// name; with dcgm, the exporter's `Hostname` label must be the same).
    #[arg(long, env = "SLICEMETER_NODE")]
    pub node: Option<String>,
    #[command(flatten)]
    pub fleet: SimFleetArgs,
    #[command(flatten)]
    pub cadence: CadenceArgs,
    /// With --source dcgm: the exporter's page.
    #[arg(
        long,
        env = "SLICEMETER_DCGM_URL",
        default_value = "http://127.0.0.1:9400/metrics"
    )]
    pub dcgm_url: String,
    /// With --source dcgm: how long one scrape may take (a slower one is time not observed).
    #[arg(long, env = "SLICEMETER_DCGM_TIMEOUT", default_value = "3s", value_parser = humantime::parse_duration)]
    pub dcgm_timeout: Duration,
    /// With --source nvml or dcgm: how the device plugin shares non-MIG GPUs: none, timeslice:N or
    /// mps:N.
    #[arg(long, env = "SLICEMETER_GPU_SHARING", default_value = "none")]
    pub gpu_sharing: Sharing,
    /// The kubelet's PodResources socket; used when it exists.
    #[arg(long, env = "SLICEMETER_KUBELET_SOCKET", default_value = podresources::DEFAULT_SOCKET)]
    pub kubelet_socket: PathBuf,
    /// Read pod labels and uids from the API server with the pod's service account.
    #[arg(long, env = "SLICEMETER_KUBE_API")]
    pub kube_api: bool,
    /// Where /proc is (the host's, mounted, in a container without hostPID).
    #[arg(long, env = "SLICEMETER_PROC_ROOT", default_value = "/proc")]
    pub proc_root: PathBuf,
    /// A TOML file `[teams] "<slice or GPU uuid>" = "<team>"` for GPUs no scheduler hands out.
    #[arg(long, env = "SLICEMETER_STATIC_MAP")]
    pub static_map: Option<PathBuf>,
    /// Where batches wait until the server has them (fsync'd; removed only after a 2xx).
    #[arg(
        long,
        env = "SLICEMETER_SPOOL_DIR",
        default_value = "/var/lib/slicemeter/spool"
    )]
    pub spool_dir: PathBuf,
    /// Most bytes the spool may hold; when full, new batches are dropped (and said so).
    #[arg(long, env = "SLICEMETER_SPOOL_MAX_BYTES", default_value_t = 1 << 30)]
    pub spool_max_bytes: u64,
    /// Only ship what the spool holds, then exit.
    #[arg(long, conflicts_with_all = ["dry_run", "once"])]
    pub drain: bool,
    /// Queue the batches the server refused (in the spool's `rejected/`) again, e.g. after fixing
    /// what made it refuse them; with --drain, ship them and exit.
    #[arg(long, conflicts_with = "dry_run")]
    pub resend_rejected: bool,
    /// With --source sim: generate `[replay-from, replay-to)` in fast-forward instead of sampling live,
    /// spool and ship it, then exit (load and fault tests).
    #[arg(long, requires = "replay_to")]
    pub replay_from: Option<DateTime<Utc>>,
    /// The end of the replay (excluded).
    #[arg(long, requires = "replay_from")]
    pub replay_to: Option<DateTime<Utc>>,
    /// Time one batch reports on in a replay.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub replay_batch_period: Duration,
    /// Stop after the first window.
    #[arg(long)]
    pub once: bool,
    /// Print the inventory and each window as JSON instead of sending them.
    #[arg(long)]
    pub dry_run: bool,
    /// Serve Prometheus metrics (`GET /metrics`) on this address, e.g. 0.0.0.0:9102; off when unset.
    #[arg(long, env = "SLICEMETER_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
}

impl CollectArgs {
    /// The node a real collector reports for: `--node`, else the host's name.
    fn host_node(&self) -> anyhow::Result<String> {
        Ok(match &self.node {
            Some(n) => n.clone(),
            None => nix::unistd::gethostname()?.to_string_lossy().into_owned(),
        })
    }

    fn shipping(&self) -> anyhow::Result<Shipping> {
        let token = match (&self.token, &self.token_file) {
            (Some(t), _) => Token::Literal(t.clone()),
            (None, Some(path)) => Token::File(path.clone()),
            (None, None) => bail!("--token or --token-file is required"),
        };
        Ok(Shipping {
            server: self.server.clone().context("--server is required")?,
            token,
            spool_dir: self.spool_dir.clone(),
            spool_max_bytes: self.spool_max_bytes,
            resend_rejected: self.resend_rejected,
        })
    }

    /// The collector's source: the simulator, or NVML with its consumers' attribution.
    async fn source(&self) -> anyhow::Result<Box<dyn Source>> {
        Ok(match self.source {
            SourceKind::Sim => Box::new(SimSource::new(
                &self.fleet.fleet(),
                &self.node.clone().unwrap_or_else(|| self.fleet.first_node()),
            )?),
            SourceKind::Nvml => Box::new(
                run::open_nvml(&NvmlOptions {
                    node: self.host_node()?,
                    sharing: self.gpu_sharing,
                    kubelet_socket: self.kubelet_socket.clone(),
                    kube_api: self.kube_api,
                    proc_root: self.proc_root.clone(),
                    static_map: self.static_map.clone(),
                })
                .await?,
            ),
            SourceKind::Dcgm => Box::new(DcgmSource::new(DcgmOptions {
                url: self.dcgm_url.clone(),
                node: self.host_node()?,
                sharing: self.gpu_sharing,
                timeout: self.dcgm_timeout,
            })?),
        })
    }
}

pub async fn run(args: CollectArgs) -> anyhow::Result<()> {
    if let Some(addr) = args.metrics_listen {
        process::serve_metrics(addr)
            .await
            .with_context(|| format!("serving metrics on {addr}"))?;
    }
    if args.drain {
        let (shipper, spool) = args.shipping()?.open(&args.host_node()?)?;
        let (shipped, of) = run::drain(shipper, spool, process::shutdown_signal()).await?;
        eprintln!("Shipped {shipped} of {of} spooled batches.");
        return Ok(());
    }
    if args.replay_from.is_some() && !matches!(args.source, SourceKind::Sim) {
        bail!("--replay-from generates simulated time: it needs --source sim");
    }
    let cadence = args.cadence.cadence(args.cadence.window)?;
    if args.dry_run {
        let mut out = std::io::stdout();
        run::dry_run(
            args.source().await?,
            cadence,
            args.once,
            &mut out,
            process::shutdown_signal(),
        )
        .await?;
        return Ok(());
    }
    let source = args.source().await?;
    let (shipper, spool) = args.shipping()?.open(source.node())?;
    if let (Some(from), Some(to)) = (args.replay_from, args.replay_to) {
        let cadence = args.cadence.cadence(args.replay_batch_period)?;
        run::replay(
            source,
            cadence,
            (from, to),
            shipper,
            spool,
            process::shutdown_signal(),
        )
        .await?;
        return Ok(());
    }
    run::live(
        source,
        cadence,
        shipper,
        spool,
        args.once,
        process::shutdown_signal(),
    )
    .await?;
    Ok(())
}
