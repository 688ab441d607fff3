//! The node collector: a source sampled every `sample_interval`, integrated into occupancy windows,
//! shipped as batches. `simulate` and `demo` drive the same parts in fast-forward.

pub mod attribution;
pub mod integrator;
pub mod shipper;
pub mod source;
pub mod spool;

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use crate::domain::batch::{Batch, Period};
use integrator::{ClosedWindow, Integrator};
use source::{CardFit, Inventory, Source, SourceError};

/// How often to sample, how long a window is, and how much time one batch reports on.
#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    pub sample_interval: Duration,
    pub window: Duration,
    /// Fast-forward only: consecutive windows are sent together in batches this long (at least one
    /// window). A live collector sends each window as it closes.
    pub batch_period: Duration,
}

impl Cadence {
    fn integrator(&self) -> Integrator {
        let window = self.window.as_millis() as i64;
        // A sample holds for up to two intervals, so one late tick loses nothing.
        let step = 2 * self.sample_interval.as_millis() as i64;
        Integrator::new(window, step.max(1))
    }
}

/// The batch for one closed window of a node.
pub fn batch(node: &str, inventory: &Inventory, w: &ClosedWindow) -> Batch {
    batch_of(node, inventory, std::slice::from_ref(w))
}

/// One batch for consecutive closed windows that tile its period.
fn batch_of(node: &str, inventory: &Inventory, windows: &[ClosedWindow]) -> Batch {
    let ms = |t| DateTime::from_timestamp_millis(t).expect("in range");
    Batch {
        node: node.to_owned(),
        period: Period {
            start: ms(windows[0].start_ms),
            end: ms(windows[windows.len() - 1].end_ms),
        },
        gpus: inventory.gpus.clone(),
        slices: inventory.slices.clone(),
        windows: windows
            .iter()
            .flat_map(|w| {
                w.occupancy
                    .iter()
                    .map(|o| o.report(&inventory.slices[o.slice].uuid, w.start_ms, w.end_ms))
            })
            .collect(),
    }
}

/// Groups closed windows (in time order) into batches of at most `batch_ms` on the grid of
/// `batch_ms`: fewer, larger batches for fast-forward, the inventory sent once per batch.
pub fn batches(
    node: &str,
    inventory: &Inventory,
    closed: &[ClosedWindow],
    batch_ms: i64,
) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut first = 0;
    for i in 1..=closed.len() {
        let split = i == closed.len()
            || closed[i].start_ms != closed[i - 1].end_ms
            || closed[i].start_ms.div_euclid(batch_ms)
                != closed[first].start_ms.div_euclid(batch_ms);
        if split {
            out.push(batch_of(node, inventory, &closed[first..i]));
            first = i;
        }
    }
    out
}

/// Replays a source over `[from, to)` in fast-forward, sampling at every multiple of the interval.
pub struct Replay<S: Source> {
    source: S,
    inventory: Inventory,
    fit: CardFit,
    integrator: Integrator,
    batch_period: Duration,
    step_ms: i64,
    next_ms: i64,
    to_ms: i64,
    done: bool,
}

impl<S: Source> Replay<S> {
    pub fn new(
        mut source: S,
        cadence: Cadence,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Self, SourceError> {
        let inventory = source.inventory()?;
        let step_ms = cadence.sample_interval.as_millis().max(1) as i64;
        let from_ms = from.timestamp_millis();
        Ok(Replay {
            source,
            fit: CardFit::of(&inventory),
            inventory,
            integrator: cadence.integrator(),
            batch_period: cadence.batch_period.max(cadence.window),
            step_ms,
            next_ms: from_ms + (step_ms - from_ms.rem_euclid(step_ms)) % step_ms,
            to_ms: to.timestamp_millis(),
            done: false,
        })
    }

    /// The batches of the next stretch up to `until` (or the end), in time order.
    ///
    /// The sample at `until` itself is taken too (before the end), so that the window ending at
    /// `until` closes now and its batch is whole rather than split across two advances.
    pub fn advance(&mut self, until: DateTime<Utc>) -> Result<Vec<Batch>, SourceError> {
        let until = until.timestamp_millis().min(self.to_ms);
        let mut closed = Vec::new();
        while self.next_ms < until || (self.next_ms == until && until < self.to_ms) {
            let t = self.next_ms;
            let mut readings = self
                .source
                .sample(DateTime::from_timestamp_millis(t).expect("in range"))?;
            fitted(&self.fit, &mut readings);
            closed.extend(self.integrator.push(t, readings));
            self.next_ms += self.step_ms;
        }
        if until >= self.to_ms && !self.done {
            self.done = true;
            closed.extend(self.integrator.flush(self.to_ms));
        }
        let batch_ms = self.batch_period.as_millis().max(1) as i64;
        Ok(batches(
            self.source.node(),
            &self.inventory,
            &closed,
            batch_ms,
        ))
    }

    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// Fits readings to the card, saying so (figures past the card are a driver's rounding, or a bug).
fn fitted(fit: &CardFit, readings: &mut [source::Reading]) {
    let cut = fit.apply(readings);
    if cut > 0 {
        tracing::debug!(
            cut,
            "Readings past what their slice can hold were cut to it."
        );
        metrics::counter!("slicemeter_collector_readings_fitted_total").increment(cut as u64);
    }
}

/// Samples a source in real time until `shutdown` fires, sending each closed window's batch to
/// `out`. On shutdown the open window is closed and sent too.
pub async fn run_live<S: Source>(
    mut source: S,
    cadence: Cadence,
    out: mpsc::Sender<Batch>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(), SourceError> {
    let inventory = source.inventory()?;
    let node = source.node().to_owned();
    tracing::info!(
        node = %node,
        gpus = inventory.gpus.len(),
        slices = inventory.slices.len(),
        "The collector is sampling."
    );
    let fit = CardFit::of(&inventory);
    let mut integrator = cadence.integrator();
    let mut tick = tokio::time::interval(cadence.sample_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let closed = tokio::select! {
            _ = tick.tick() => {
                let now = Utc::now();
                let mut readings = source.sample(now)?;
                fitted(&fit, &mut readings);
                integrator.push(now.timestamp_millis(), readings)
            }
            _ = shutdown.changed() => {
                let closed = integrator.flush(Utc::now().timestamp_millis());
                for w in &closed {
                    if out.send(batch(&node, &inventory, w)).await.is_err() {
                        break;
                    }
                }
                return Ok(());
            }
        };
        for w in &closed {
            if out.send(batch(&node, &inventory, w)).await.is_err() {
                return Ok(());
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Spool(#[from] spool::SpoolError),
}

/// Samples `source` live into `spool` while `shipper` ships it, until `stop` fires. The last window is
/// spooled; the shipper then gets `grace` to send what is left, which otherwise waits in the spool.
pub async fn run_spooled<S: Source + 'static>(
    source: S,
    cadence: Cadence,
    spool: std::sync::Arc<spool::Spool>,
    shipper: shipper::Shipper,
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
