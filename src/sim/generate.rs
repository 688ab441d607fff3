//! Fast-forward generation of a simulated fleet's batches (`simulate`, `demo`'s back-fill, the ingest
//! benchmark): the same source, integrator and batches as a live collector, sampled as fast as the
//! CPUs go. Day by day, waves of nodes are spread over threads and the batches come out in (day,
//! node, time) order, so the same seed gives the same bytes whatever the thread count.

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

/// Nodes one generator thread takes at a time.
const NODES_PER_THREAD: usize = 4;

/// Generates the batches of every node of `fleet` over `[from, to)` and hands them to `sink` one
/// node's day at a time, in (day, node, time) order. Each node's source holds only its node, and a
/// wave of a few nodes per thread is generated at once: what is held at any time is the fleet once
/// and a wave's batches, whatever the number of days.
pub fn generate(
    fleet: &SimFleet,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    cadence: Cadence,
    sink: impl FnMut(Vec<Batch>) -> bool,
) -> Result<(), SourceError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    generate_on(threads, fleet, from, to, cadence, sink)
}

/// [`generate`] on `threads` threads.
pub fn generate_on(
    threads: usize,
    fleet: &SimFleet,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    cadence: Cadence,
    mut sink: impl FnMut(Vec<Batch>) -> bool,
) -> Result<(), SourceError> {
    let mut replays = fleet
        .nodes
        .iter()
        .map(|n| Replay::new(SimSource::new(fleet, &n.name)?, cadence, from, to))
        .collect::<Result<Vec<_>, _>>()?;
    let threads = threads.max(1);
    let mut until = from;
    while until < to {
        until = (until + Duration::days(1)).min(to);
        for wave in replays.chunks_mut(threads * NODES_PER_THREAD) {
            let parts: Vec<Result<Vec<Vec<Batch>>, SourceError>> = std::thread::scope(|scope| {
                let handles: Vec<_> = wave
                    .chunks_mut(NODES_PER_THREAD)
                    .map(|chunk| {
                        scope.spawn(move || {
                            chunk
                                .iter_mut()
                                .map(|r| r.advance(until))
                                .collect::<Result<Vec<_>, _>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a generator thread panicked"))
                    .collect()
            });
            for part in parts {
                for node_day in part? {
                    if !sink(node_day) {
                        return Ok(());
                    }
                }
            }
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
    // A few batches ahead of the ingest, no more: the generator waits for it.
    let (tx, mut rx) = mpsc::channel::<Batch>(concurrency.max(1) * 2);
    let generator = tokio::task::spawn_blocking(move || {
        generate(&fleet, from, to, cadence, |node_day| {
            node_day.into_iter().all(|b| tx.blocking_send(b).is_ok())
        })
    });
    let mut totals = Totals::default();
    let mut results = futures_util::stream::poll_fn(|cx| rx.poll_recv(cx))
        .map(&ingest)
        .buffer_unordered(concurrency);
    while let Some(r) = results.next().await {
        let outcome = r.map_err(|e| anyhow::anyhow!("ingest failed: {e}"))?;
        totals.batches += 1;
        totals.inserted += outcome.inserted;
        totals.duplicates += outcome.duplicates;
        bar.inc(1);
    }
    drop(results);
    generator.await??;
    bar.finish_and_clear();
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(fleet: &SimFleet, hours: i64, batch_minutes: u64) -> Vec<u8> {
        run_on(
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            fleet,
            hours,
            batch_minutes,
        )
    }

    fn run_on(threads: usize, fleet: &SimFleet, hours: i64, batch_minutes: u64) -> Vec<u8> {
        let from: DateTime<Utc> = "2026-10-01T00:00:00Z".parse().unwrap();
        let cadence = Cadence {
            sample_interval: StdDuration::from_secs(5),
            window: StdDuration::from_secs(60),
            batch_period: StdDuration::from_secs(batch_minutes * 60),
        };
        let mut out = Vec::new();
        generate_on(
            threads,
            fleet,
            from,
            from + Duration::hours(hours),
            cadence,
            |day| {
                for b in day {
                    serde_json::to_writer(&mut out, &b).unwrap();
                    out.push(b'\n');
                }
                true
            },
        )
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
    fn the_thread_count_changes_no_byte() {
        // 40 GPUs: ten nodes, so three threads take waves of 12 nodes in chunks of four, and one
        // thread all ten in one.
        let fleet = SimFleet::generate(5, 40);
        let one = run_on(1, &fleet, 26, 60);
        assert!(!one.is_empty());
        assert_eq!(run_on(3, &fleet, 26, 60), one);
        assert_eq!(run_on(16, &fleet, 26, 60), one);
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
