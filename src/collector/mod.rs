//! The node collector: a source sampled every `sample_interval`, integrated into occupancy windows,
//! shipped as batches. This module has the cadence, the batches and the fast-forward [`Replay`];
//! `run` has the `collect` command's modes (live, replay, drain, dry run) and the NVML wiring;
//! `sim::generate` drives the same parts in fast-forward for `simulate` and `demo`. It reaches the
//! server over HTTP only.

pub mod attribution;
pub mod import;
pub mod integrator;
pub mod run;
pub mod shipper;
pub mod source;
pub mod spool;

use std::time::Duration;

use chrono::{DateTime, Utc};

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
    pub fn integrator(&self) -> Integrator {
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
                w.windows
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
pub fn fitted(fit: &CardFit, readings: &mut [source::Reading]) {
    let cut = fit.apply(readings);
    if cut > 0 {
        tracing::debug!(
            cut,
            "Readings past what their slice can hold were cut to it."
        );
        metrics::counter!("slicemeter_collector_readings_fitted_total").increment(cut as u64);
    }
}
