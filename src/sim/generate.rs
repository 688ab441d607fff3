//! Fast-forward generation of a simulated fleet's batches (`simulate`, `demo`'s back-fill, the ingest
//! benchmark): the same source, integrator and batches as a live collector, sampled as fast as the
//! CPUs go. Day by day, nodes are spread over threads and the batches come out in (day, node, time)
//! order, so the same seed gives the same bytes whatever the thread count.

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::mpsc;

use super::SimFleet;
use super::source::SimSource;
use crate::collector::source::SourceError;
use crate::collector::{Cadence, Replay};
use crate::domain::batch::{Batch, IngestOutcome};

/// Generates the batches of every node of `fleet` over `[from, to)`, handing each day's to `sink`.
pub fn generate(
    fleet: &SimFleet,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    cadence: Cadence,
    mut sink: impl FnMut(Vec<Batch>) -> bool,
) -> Result<(), SourceError> {
    let mut replays = fleet
        .nodes
        .iter()
        .map(|n| Replay::new(SimSource::new(fleet.clone(), &n.name)?, cadence, from, to))
        .collect::<Result<Vec<_>, _>>()?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = replays.len().div_ceil(threads).max(1);
    let mut until = from;
    while until < to {
        until = (until + Duration::days(1)).min(to);
        let parts: Vec<Result<Vec<Batch>, SourceError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = replays
                .chunks_mut(per_thread)
                .map(|chunk| {
                    scope.spawn(move || {
                        let mut out = Vec::new();
                        for r in chunk {
                            out.extend(r.advance(until)?);
                        }
                        Ok(out)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a generator thread panicked"))
                .collect()
        });
        let mut day = Vec::new();
        for part in parts {
            day.extend(part?);
        }
        if !sink(day) {
            break;
        }
    }
    Ok(())
}

/// How many batches [`generate`] makes, for progress bars.
pub fn expected_batches(
    fleet: &SimFleet,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    batch_period: StdDuration,
) -> u64 {
    let batches =
        ((to - from).num_milliseconds() as u64).div_ceil(batch_period.as_millis().max(1) as u64);
    batches * fleet.nodes.len() as u64
}

/// A progress bar on a terminal, nothing elsewhere.
pub fn progress(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} batches, {per_sec}, {eta} left")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

/// Totals of a run of batches through ingest.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub batches: u64,
    pub inserted: u64,
    pub duplicates: u64,
}

/// Generates on a blocking thread and hands every batch to `ingest`, `concurrency` at a time.
pub async fn generate_and_ingest<F, Fut, E>(
    fleet: SimFleet,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    cadence: Cadence,
    concurrency: usize,
    bar: ProgressBar,
    ingest: F,
) -> Result<Totals, anyhow::Error>
where
    F: Fn(Batch) -> Fut,
    Fut: std::future::Future<Output = Result<IngestOutcome, E>>,
    E: std::fmt::Display,
{
    let (tx, mut rx) = mpsc::channel::<Vec<Batch>>(2);
    let generator = tokio::task::spawn_blocking(move || {
        generate(&fleet, from, to, cadence, |day| {
            tx.blocking_send(day).is_ok()
        })
    });
    let mut totals = Totals::default();
    while let Some(day) = rx.recv().await {
        let mut results =
            futures_util::stream::iter(day.into_iter().map(&ingest)).buffer_unordered(concurrency);
        while let Some(r) = results.next().await {
            let outcome = r.map_err(|e| anyhow::anyhow!("ingest failed: {e}"))?;
            totals.batches += 1;
            totals.inserted += outcome.inserted;
            totals.duplicates += outcome.duplicates;
            bar.inc(1);
        }
    }
    generator.await??;
    bar.finish_and_clear();
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(fleet: &SimFleet, hours: i64, batch_minutes: u64) -> Vec<u8> {
        let from: DateTime<Utc> = "2026-10-01T00:00:00Z".parse().unwrap();
        let cadence = Cadence {
            sample_interval: StdDuration::from_secs(5),
            window: StdDuration::from_secs(60),
            batch_period: StdDuration::from_secs(batch_minutes * 60),
        };
        let mut out = Vec::new();
        generate(fleet, from, from + Duration::hours(hours), cadence, |day| {
            for b in day {
                serde_json::to_writer(&mut out, &b).unwrap();
                out.push(b'\n');
            }
            true
        })
        .unwrap();
        out
    }

    #[test]
    fn the_same_seed_gives_byte_identical_batches_and_another_seed_other_ones() {
        let a = run(&SimFleet::generate(11, 9), 26, 60);
        let b = run(&SimFleet::generate(11, 9), 26, 60);
        let c = run(&SimFleet::generate(12, 9), 26, 60);
        assert!(!a.is_empty());
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn every_window_of_a_day_lies_in_its_batch_period_and_periods_tile_the_day() {
        let fleet = SimFleet::generate(4, 8);
        let parse = |out: Vec<u8>| -> Vec<Batch> {
            out.split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_slice(l).unwrap())
                .collect()
        };
        let minutely = parse(run(&fleet, 24, 1));
        let hourly = parse(run(&fleet, 24, 60));
        assert_eq!(minutely.len(), 2 * 24 * 60, "two nodes, one batch a minute");
        assert_eq!(hourly.len(), 2 * 24, "two nodes, one batch an hour");
        let windows = |bs: &[Batch]| {
            bs.iter()
                .flat_map(|b| b.windows.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            windows(&minutely),
            windows(&hourly),
            "grouping changes no window"
        );
        for b in &hourly {
            assert_eq!((b.period.end - b.period.start).num_seconds(), 3600);
        }
        for b in &minutely {
            assert_eq!((b.period.end - b.period.start).num_seconds(), 60);
            for w in &b.windows {
                assert!(w.start >= b.period.start && w.end <= b.period.end);
                assert!(w.held_seconds <= 60.0);
                assert!(w.compute_active_seconds.unwrap() <= w.held_seconds);
            }
        }
    }
}
