//! The `collect` command's four modes over a source: live (sample, spool, ship until stopped), replay
//! (a simulated stretch in fast-forward, spooled and shipped), drain (ship what the spool holds) and
//! dry run (print the windows instead); the spool and shipper they share; and the NVML source with
//! its consumers' attribution (kubelet PodResources, the API server, processes, a static map).

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use super::attribution::kubeapi::KubeApi;
use super::attribution::procfs::Procfs;
use super::attribution::{self, Attribution, load_static_map};
use super::integrator::{Hold, Integrator};
use super::shipper::{ShipError, Shipper};
use super::source::nvml::real::RealNvml;
use super::source::nvml::{NvmlSource, Sharing};
use super::source::{Source, SourceError, Timing};
use super::spool::{self, Spool};
use super::{Cadence, CardFit, Replay, batch, fitted};
use crate::domain::batch::Batch;

#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Spool(#[from] spool::SpoolError),
    #[error(transparent)]
    Ship(#[from] ShipError),
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Where a collector's token comes from.
#[derive(Debug, Clone)]
pub enum Token {
    /// Given on the command line or in the environment.
    Literal(String),
    /// Read from a file; `{node}` in the path is the node's name (one file per node in a Secret).
    File(String),
}

/// Where batches go: the server and token, and the spool they wait in until it has them.
#[derive(Debug, Clone)]
pub struct Shipping {
    pub server: String,
    pub token: Token,
    pub spool_dir: PathBuf,
    pub spool_max_bytes: u64,
    /// Queue the batches the server refused before (the spool's `rejected/`) again.
    pub resend_rejected: bool,
}

impl Shipping {
    /// The shipper and the spool of node `node`'s collector.
    pub fn open(&self, node: &str) -> Result<(Shipper, Arc<Spool>), CollectorError> {
        let token = match &self.token {
            Token::Literal(t) => t.clone(),
            Token::File(path) => {
                let path = path.replace("{node}", node);
                std::fs::read_to_string(&path)
                    .map_err(|e| {
                        CollectorError::Setup(format!(
                            "reading the collector token from {path}: {e}"
                        ))
                    })?
                    .trim()
                    .to_owned()
            }
        };
        let shipper = Shipper::new(&self.server, &token)
            .map_err(|e| CollectorError::Setup(format!("the HTTP client: {e}")))?;
        let spool = Spool::open(&self.spool_dir, self.spool_max_bytes)?;
        super::shipper::register_metrics();
        if self.resend_rejected {
            let n = spool.requeue_rejected()?;
            tracing::info!(batches = n, "Batches set aside before are queued again.");
            eprintln!("{n} set-aside batches queued again.");
        }
        Ok((shipper, Arc::new(spool)))
    }
}

/// How the NVML source finds who holds each slice.
#[derive(Debug, Clone)]
pub struct NvmlOptions {
    /// The node's name, as reported.
    pub node: String,
    /// How the device plugin shares non-MIG GPUs.
    pub sharing: Sharing,
    /// The kubelet's PodResources socket; used when it exists.
    pub kubelet_socket: PathBuf,
    /// Read pod labels and uids from the API server with the pod's service account.
    pub kube_api: bool,
    /// Where /proc is.
    pub proc_root: PathBuf,
    /// `[teams] "<slice or GPU uuid>" = "<team>"` for GPUs no scheduler hands out.
    pub static_map: Option<PathBuf>,
}

/// This machine's GPUs through NVML, with their consumers' attribution. With a kubelet, it waits a
/// little for the first listing, so that the first windows are attributed too.
pub async fn open_nvml(o: &NvmlOptions) -> Result<NvmlSource<RealNvml>, CollectorError> {
    let api = RealNvml::init().map_err(|e| CollectorError::Setup(format!("NVML: {e}")))?;
    let mut attribution = Attribution {
        procfs: Procfs {
            root: o.proc_root.clone(),
        },
        ..Attribution::default()
    };
    if let Some(map) = &o.static_map {
        attribution.static_map = load_static_map(map).map_err(CollectorError::Setup)?;
    }
    if o.kubelet_socket.exists() {
        let api = if o.kube_api {
            Some(
                KubeApi::in_cluster(&o.node)
                    .map_err(|e| CollectorError::Setup(format!("the Kubernetes API: {e}")))?,
            )
        } else {
            None
        };
        let (snapshot, _task) =
            attribution::watch(o.kubelet_socket.clone(), api, Duration::from_secs(5));
        for _ in 0..50 {
            if snapshot.read().expect("not poisoned").is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        attribution.kubelet = Some(snapshot);
    } else {
        tracing::info!(socket = %o.kubelet_socket.display(), "No kubelet here: holders are processes' units, containers or users.");
    }
    Ok(NvmlSource::new(api, attribution, &o.node, o.sharing))
}

/// Ships what the spool holds, then returns how many batches were shipped of how many, or stops
/// early when `shutdown` resolves.
pub async fn drain(
    shipper: Shipper,
    spool: Arc<Spool>,
    shutdown: impl Future<Output = ()>,
) -> Result<(usize, usize), CollectorError> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (_finished, finished) = tokio::sync::watch::channel(true);
    let batches = spool.len();
    let shipped = tokio::spawn(shipper.run_spool(spool.clone(), stopped, finished));
    tokio::pin!(shipped);
    tokio::select! {
        r = &mut shipped => r.expect("the shipper does not panic")?,
        _ = shutdown => {
            stop.send(true).ok();
            shipped.await.expect("the shipper does not panic")?;
        }
    }
    Ok((batches - spool.len(), batches))
}

/// Prints the source's inventory, then each window's batch as it closes, as JSON to `out`, until
/// `shutdown` resolves (or after the first window with `once`).
pub async fn dry_run(
    mut source: Box<dyn Source>,
    cadence: Cadence,
    once: bool,
    out: &mut (dyn Write + Send),
    shutdown: impl Future<Output = ()>,
) -> Result<(), CollectorError> {
    let inventory = source.inventory()?;
    let head = serde_json::json!({
        "node": source.node(),
        "inventory": {"gpus": inventory.gpus, "slices": inventory.slices},
    });
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&head).expect("JSON")
    )?;
    let (tx, mut rx) = mpsc::channel(10_000);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let sampling = tokio::spawn(run_live(source, cadence, tx, stopped));
    tokio::pin!(shutdown);
    let mut printed = 0;
    // A finished future must not be polled again: the signal is awaited once.
    let mut signalled = false;
    loop {
        tokio::select! {
            batch = rx.recv() => match batch {
                Some(b) => {
                    writeln!(out, "{}", serde_json::to_string_pretty(&b).expect("JSON"))?;
                    printed += 1;
                    if once && printed == 1 {
                        stop.send(true).ok();
                    }
                }
                None => break,
            },
            _ = &mut shutdown, if !signalled => {
                signalled = true;
                stop.send(true).ok();
            }
        }
    }
    sampling.await.expect("the sampler does not panic")?;
    Ok(())
}

/// Generates `[from, to)` of `source` in fast-forward into the spool on a blocking thread while the
/// shipper ships it; returns once everything is shipped (or `shutdown` resolves, leaving the rest
/// in the spool).
pub async fn replay<S: Source + Send + 'static>(
    source: S,
    cadence: Cadence,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    shipper: Shipper,
    spool: Arc<Spool>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), CollectorError> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (finished, finished_rx) = tokio::sync::watch::channel(false);
    let shipped = tokio::spawn(shipper.run_spool(spool.clone(), stopped, finished_rx));
    let replayed = tokio::task::spawn_blocking({
        let spool = spool.clone();
        move || replay_into_spool(source, cadence, from, to, &spool)
    });
    tokio::select! {
        r = async {
            let windows = replayed.await.expect("the replay does not panic")?;
            tracing::info!(windows, "The replay is spooled; shipping what is left.");
            finished.send(true).ok();
            shipped.await.expect("the shipper does not panic")?;
            Ok::<(), CollectorError>(())
        } => r,
        _ = shutdown => {
            stop.send(true).ok();
            Ok(())
        }
    }
}

/// Samples `source` live, spooling and shipping each window, until `shutdown` resolves (or right
/// after the first window with `once`).
pub async fn live<S: Source + 'static>(
    source: S,
    cadence: Cadence,
    shipper: Shipper,
    spool: Arc<Spool>,
    once: bool,
    shutdown: impl Future<Output = ()>,
) -> Result<(), CollectorError> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(run_spooled(
        source,
        cadence,
        spool,
        shipper,
        stopped,
        Duration::from_secs(10),
    ));
    if once {
        // The first window closes within a window and a little; stop right after.
        tokio::select! {
            _ = tokio::time::sleep(cadence.window + cadence.sample_interval * 2) => {}
            _ = shutdown => {}
        }
    } else {
        shutdown.await;
    }
    stop.send(true).ok();
    running.await.expect("the collector does not panic")
}

/// Samples a source in real time until `shutdown` fires, sending each closed window's batch to
/// `out`. On shutdown the open window is closed and sent too. A missed sample (a failed scrape) is
/// time not observed; a changed inventory closes the windows so far, which are sent with the old
/// one.
pub async fn run_live<S: Source>(
    mut source: S,
    cadence: Cadence,
    out: mpsc::Sender<Batch>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(), SourceError> {
    let mut inventory = source.inventory()?;
    let node = source.node().to_owned();
    tracing::info!(
        node = %node,
        gpus = inventory.gpus.len(),
        slices = inventory.slices.len(),
        "The collector is sampling."
    );
    let timing = source.timing();
    let interval_ms = cadence.sample_interval.as_millis().max(1) as i64;
    let new_integrator = || match timing {
        Timing::Sampled => cadence.integrator(),
        Timing::Slotted => Integrator::with_hold(
            cadence.window.as_millis().max(1) as i64,
            Hold::scraped(interval_ms),
        ),
    };
    let mut fit = CardFit::of(&inventory);
    let mut integrator = new_integrator();
    let mut tick = match timing {
        Timing::Sampled => tokio::time::interval(cadence.sample_interval),
        Timing::Slotted => {
            // Mid-slot, so that a tick a little early or late still falls in its slot.
            let now = Utc::now().timestamp_millis();
            let next = (now.div_euclid(interval_ms) + 1) * interval_ms + interval_ms / 2;
            let wait = Duration::from_millis((next - now).max(0) as u64);
            tokio::time::interval_at(tokio::time::Instant::now() + wait, cadence.sample_interval)
        }
    };
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_ms = None;
    loop {
        let mut closed = Vec::new();
        tokio::select! {
            _ = tick.tick() => {
                let now = Utc::now();
                let t = match timing {
                    Timing::Sampled => now.timestamp_millis(),
                    Timing::Slotted => now.timestamp_millis().div_euclid(interval_ms) * interval_ms,
                };
                if last_ms.is_some_and(|last| t <= last) {
                    continue;
                }
                let mut readings = match source.sample(now) {
                    Ok(r) => r,
                    Err(SourceError::Missed(reason)) => {
                        tracing::warn!(node = %node, %reason, at = %now, "A sample was missed; its time is not observed.");
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if source.inventory_changed() {
                    closed.extend(integrator.push(t, Vec::new()));
                    closed.extend(integrator.flush(t));
                    for w in closed.iter().filter(|_| !inventory.gpus.is_empty()) {
                        if out.send(batch(&node, &inventory, w)).await.is_err() {
                            return Ok(());
                        }
                    }
                    closed.clear();
                    inventory = source.inventory()?;
                    fit = CardFit::of(&inventory);
                    integrator = new_integrator();
                }
                fitted(&fit, &mut readings);
                let before = integrator.unobserved_ms();
                closed = integrator.push(t, readings);
                last_ms = Some(t);
                let lost = integrator.unobserved_ms() - before;
                if lost > 0 {
                    metrics::counter!("slicemeter_collector_unobserved_gaps_total")
                        .increment(1);
                    match timing {
                        Timing::Sampled => tracing::warn!(
                            node = %node,
                            unobserved_ms = lost,
                            until = %now,
                            "The sampler was late: time no sample covered is left out of the windows."
                        ),
                        Timing::Slotted => tracing::warn!(
                            node = %node,
                            unobserved_ms = lost,
                            until = %now,
                            "No scrape covered this stretch: it is left out of the windows."
                        ),
                    }
                }
            }
            _ = shutdown.changed() => {
                let end = match (timing, last_ms) {
                    (Timing::Slotted, Some(last)) => last + interval_ms,
                    _ => Utc::now().timestamp_millis(),
                };
                let closed = integrator.flush(end);
                for w in closed.iter().filter(|_| !inventory.gpus.is_empty()) {
                    if out.send(batch(&node, &inventory, w)).await.is_err() {
                        break;
                    }
                }
                return Ok(());
            }
        };
        // A source with no GPUs (an exporter that lists none yet) has nothing to report.
        if inventory.gpus.is_empty() {
            continue;
        }
        for w in &closed {
            if out.send(batch(&node, &inventory, w)).await.is_err() {
                return Ok(());
            }
        }
    }
}

/// Samples `source` live into `spool` while `shipper` ships it, until `stop` fires. The last window is
/// spooled; the shipper then gets `grace` to send what is left, which otherwise waits in the spool.
pub async fn run_spooled<S: Source + 'static>(
    source: S,
    cadence: Cadence,
    spool: std::sync::Arc<spool::Spool>,
    shipper: Shipper,
    stop: tokio::sync::watch::Receiver<bool>,
    grace: Duration,
) -> Result<(), CollectorError> {
    let (tx, mut rx) = mpsc::channel::<Batch>(64);
    let (ship_stop, ship_stopped) = tokio::sync::watch::channel(false);
    let (finished, finished_rx) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(run_live(source, cadence, tx, stop));
    let spooler = {
        let spool = spool.clone();
        tokio::spawn(async move {
            while let Some(b) = rx.recv().await {
                spool.push(&b)?;
            }
            Ok::<(), spool::SpoolError>(())
        })
    };
    let mut shipping = tokio::spawn(shipper.run_spool(spool, ship_stopped, finished_rx));
    let sampled = sampler.await.expect("the sampler does not panic");
    let spooled = spooler.await.expect("the spooler does not panic");
    finished.send(true).ok();
    let shipped = match tokio::time::timeout(grace, &mut shipping).await {
        Ok(r) => r.expect("the shipper does not panic"),
        Err(_) => {
            ship_stop.send(true).ok();
            shipping.await.expect("the shipper does not panic")
        }
    };
    sampled?;
    spooled?;
    shipped?;
    Ok(())
}

/// Replays `source` over `[from, to)` in fast-forward into `spool`, batch by batch, on this thread.
pub fn replay_into_spool<S: Source>(
    source: S,
    cadence: Cadence,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    spool: &spool::Spool,
) -> Result<u64, CollectorError> {
    let mut replay = Replay::new(source, cadence, from, to)?;
    let mut windows = 0;
    let mut until = from;
    while !replay.is_done() {
        until = (until + chrono::Duration::hours(1)).min(to);
        for b in replay.advance(until)? {
            windows += b.windows.len() as u64;
            spool.push(&b)?;
        }
    }
    Ok(windows)
}
