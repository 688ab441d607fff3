//! `import prometheus`: past months back-filled from what a Prometheus scraped of the fleet's
//! dcgm-exporters, turned into the windows live collection (`collect --source dcgm`) would have
//! sent for the same samples, and sent through the ingest contract.
//!
//! A chunk of time is read whole before anything of it is sent: the raw samples of the series
//! slicemeter reads (`prometheus`), each series' labels read once (`dcgm::read::key`), the samples
//! laid on the slots of the scrape interval (`Timing::Slotted`: a sample stands for its slot, a
//! missing slot is time not observed), each slot read into the nodes' inventories and readings as
//! a page would be, and each slot held as a step of the integrator, skipping the time the server
//! already has (`GET /v1/ingest/coverage`), so that importing what live collection or an earlier
//! import stored sends nothing again. A node's windows become one batch per chunk (more where its
//! inventory changed or a gap split its time).

pub mod prometheus;

use std::collections::BTreeMap;

use super::integrator::{ClosedWindow, Hold, Integrator};
use super::source::dcgm::page::Metric;
use super::source::dcgm::read::{self, ReadOptions, SeriesKey};
use super::source::dcgm::refusal::Refusal;
use super::source::dcgm::slices::SliceAt;
use super::source::nvml::Sharing;
use super::source::{CardFit, Inventory};
use super::{batches, fitted};
use crate::domain::batch::Batch;
use prometheus::RawSeries;

/// The selector of every series slicemeter reads (the exporter's `-o` mode writes the names in
/// lower case).
pub fn selector() -> String {
    names_selector(&Metric::ALL, "")
}

fn names_selector(metrics: &[Metric], more: &str) -> String {
    let names: Vec<&str> = metrics.iter().map(|m| m.name()).collect();
    format!("{{__name__=~\"(?i){}\"{more}}}", names.join("|"))
}

/// The selectors a chunk is read with: the figures of every device, and the frame buffer's free
/// and reserved memory only of the GPUs whose model NVIDIA's tables do not know (the only ones
/// whose memory is read from them): a third of the samples, on a fleet of known models.
pub fn chunk_selectors() -> [String; 2] {
    [
        names_selector(&[Metric::FbUsed, Metric::EngineActive, Metric::GpuUtil], ""),
        names_selector(
            &[Metric::FbFree, Metric::FbReserved],
            &format!(
                ",modelName!~\"(?i).*({}).*\"",
                crate::domain::profiles::TABLE_MODEL_NEEDLES.join("|")
            ),
        ),
    ]
}

/// How a chunk is read.
#[derive(Debug, Clone)]
pub struct ChunkPlan {
    /// The scrape interval: a sample stands for its slot of this length.
    pub interval_ms: i64,
    /// The window grid's step, as `collect --window`.
    pub window_ms: i64,
    pub read: ReadOptions,
    /// Nodes whose device plugin shares GPUs otherwise than `read.sharing` says.
    pub node_sharing: BTreeMap<String, Sharing>,
}

/// What one chunk makes: each node's batches, and what was not read.
#[derive(Debug, Default)]
pub struct ChunkBatches {
    pub batches: BTreeMap<String, Vec<Batch>>,
    pub refused: Vec<Refusal>,
    /// Series read (with a known name).
    pub series: usize,
    /// Samples inside the chunk.
    pub samples: usize,
}

/// Stored time per node, in Unix milliseconds, sorted and disjoint.
pub type Covered = BTreeMap<String, Vec<(i64, i64)>>;

/// The nodes the series name (those read without refusal).
pub fn nodes_of(series: &[RawSeries], plan: &ChunkPlan) -> Vec<String> {
    let mut nodes: Vec<String> = series
        .iter()
        .filter_map(|s| {
            let metric = Metric::of_name(&s.name)?;
            read::key(metric, &s.labels, &plan.read, None)
                .ok()
                .map(|k| k.node)
        })
        .collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// One node's state through a chunk: its inventory now, the integrator over it, and the windows
/// of earlier inventories (each with its own).
struct NodeRun {
    inventory: Inventory,
    at: Vec<SliceAt>,
    fit: CardFit,
    integrator: Integrator,
    windows: Vec<ClosedWindow>,
    done: Vec<(Inventory, Vec<ClosedWindow>)>,
}

impl NodeRun {
    fn close(&mut self) {
        let mut windows = std::mem::take(&mut self.windows);
        windows.extend(self.integrator.close());
        if !windows.is_empty() {
            self.done.push((self.inventory.clone(), windows));
        }
    }
}

/// The parts of `[a, b)` not in `covered` (sorted, disjoint).
fn uncovered(a: i64, b: i64, covered: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut from = a;
    for &(c0, c1) in covered {
        if c1 <= from {
            continue;
        }
        if c0 >= b {
            break;
        }
        if c0 > from {
            out.push((from, c0));
        }
        from = from.max(c1);
        if from >= b {
            return out;
        }
    }
    if from < b {
        out.push((from, b));
    }
    out
}

/// Reads the samples of `series` within the chunk `[from_ms, to_ms)` into each node's batches,
/// leaving out the time `covered` says is stored. `from_ms` and `to_ms` lie on the window grid.
pub fn chunk_batches(
    series: &[RawSeries],
    (from_ms, to_ms): (i64, i64),
    plan: &ChunkPlan,
    covered: &Covered,
) -> ChunkBatches {
    let mut out = ChunkBatches::default();
    let i = plan.interval_ms;
    // Each series' labels read once; its samples laid on their slots.
    let mut keys: Vec<SeriesKey> = Vec::new();
    let mut slots: BTreeMap<i64, Vec<(usize, f64)>> = BTreeMap::new();
    for s in series {
        let Some(metric) = Metric::of_name(&s.name) else {
            continue;
        };
        out.series += 1;
        let key = match read::key(metric, &s.labels, &plan.read, None) {
            Ok(k) => k,
            Err(r) => {
                out.refused.push(r);
                continue;
            }
        };
        keys.push(key);
        let k = keys.len() - 1;
        let mut last_slot = None;
        for &(t, v) in &s.samples {
            if t < from_ms || t >= to_ms {
                continue;
            }
            let slot = t.div_euclid(i) * i;
            // A second sample in one slot (a scrape faster than the interval) is not another.
            if last_slot == Some(slot) {
                continue;
            }
            last_slot = Some(slot);
            out.samples += 1;
            slots.entry(slot).or_default().push((k, v));
        }
    }
    let mut runs: BTreeMap<String, NodeRun> = BTreeMap::new();
    let none = Vec::new();
    for (slot, samples) in &slots {
        let nodes = read::nodes(
            samples.iter().map(|&(k, v)| (&keys[k], v)),
            &mut out.refused,
        );
        for (node, scrape) in nodes {
            let sharing = plan
                .node_sharing
                .get(&node)
                .copied()
                .unwrap_or(plan.read.sharing);
            let (inventory, at) = scrape.inventory(sharing, &mut out.refused);
            let run = runs.entry(node.clone()).or_insert_with(|| NodeRun {
                fit: CardFit::of(&inventory),
                inventory: inventory.clone(),
                at: at.clone(),
                integrator: Integrator::with_hold(plan.window_ms, Hold::scraped(i)),
                windows: Vec::new(),
                done: Vec::new(),
            });
            if run.inventory != inventory {
                run.close();
                run.fit = CardFit::of(&inventory);
                run.inventory = inventory;
                run.at = at;
                run.integrator = Integrator::with_hold(plan.window_ms, Hold::scraped(i));
            }
            let mut readings = scrape.readings(&run.at, &mut out.refused);
            fitted(&run.fit, &mut readings);
            let end = (slot + i).min(to_ms);
            for (a, b) in uncovered(*slot, end, covered.get(&node).unwrap_or(&none)) {
                let closed = run.integrator.hold(a, b, &readings);
                run.windows.extend(closed);
            }
        }
    }
    let chunk_ms = to_ms - from_ms;
    for (node, mut run) in runs {
        run.close();
        let node_batches: Vec<Batch> = run
            .done
            .iter()
            .flat_map(|(inventory, windows)| batches(&node, inventory, windows, chunk_ms))
            .collect();
        if !node_batches.is_empty() {
            out.batches.insert(node, node_batches);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collector::source::dcgm::read::ConsumerLabels;

    fn series(metric: &str, gi: &str, pod: Option<&str>, samples: Vec<(i64, f64)>) -> RawSeries {
        let mut labels = vec![
            ("UUID".to_owned(), "GPU-1".to_owned()),
            ("modelName".to_owned(), "NVIDIA H100 80GB HBM3".to_owned()),
            ("GPU_I_PROFILE".to_owned(), "1g.10gb".to_owned()),
            ("GPU_I_ID".to_owned(), gi.to_owned()),
            ("Hostname".to_owned(), "n1".to_owned()),
        ];
        if let Some(p) = pod {
            labels.push(("namespace".into(), "nlp".into()));
            labels.push(("pod".into(), p.into()));
        }
        RawSeries {
            name: metric.into(),
            labels,
            samples,
        }
    }

    fn plan() -> ChunkPlan {
        ChunkPlan {
            interval_ms: 1_000,
            window_ms: 10_000,
            read: ReadOptions {
                consumers: ConsumerLabels::Plain,
                sharing: Sharing::None,
            },
            node_sharing: BTreeMap::new(),
        }
    }

    /// Pod `a` holds instance 9 for seconds 2 to 13 (scraped a little after each second), with no
    /// scrape at 7 and 8; the instance is free before and after.
    fn scraped() -> Vec<RawSeries> {
        let held: Vec<(i64, f64)> = (2..14)
            .filter(|k| !(7..9).contains(k))
            .map(|k| (k * 1_000 + 437, 2_048.0))
            .collect();
        let free: Vec<(i64, f64)> = (0..20)
            .filter(|k| !(2..14).contains(k))
            .map(|k| (k * 1_000 + 437, 0.0))
            .collect();
        vec![
            series("DCGM_FI_DEV_FB_USED", "9", Some("a"), held),
            series("DCGM_FI_DEV_FB_USED", "9", None, free),
        ]
    }

    #[test]
    fn a_chunk_makes_the_windows_live_collection_makes_of_the_same_scrapes_and_leaves_gaps_out() {
        let out = chunk_batches(&scraped(), (0, 20_000), &plan(), &Covered::new());
        assert!(out.refused.is_empty(), "{:?}", out.refused);
        let batches = &out.batches["n1"];
        // The same scrapes, as a live collector would have pushed them into its integrator.
        let mut live = Integrator::with_hold(10_000, Hold::scraped(1_000));
        let slots: Vec<i64> = (0..20).filter(|k| !(7..9).contains(k)).collect();
        let mut closed = Vec::new();
        for k in &slots {
            let held = (2..14).contains(k);
            let reading = crate::collector::source::Reading {
                slice: 0,
                consumer: held.then(|| {
                    std::sync::Arc::new(crate::domain::batch::ConsumerReport {
                        namespace: Some("nlp".into()),
                        pod: Some("a".into()),
                        ..Default::default()
                    })
                }),
                memory_used_bytes: if held { 2_048 << 20 } else { 0 },
                compute_active_ppm: None,
            };
            closed.extend(live.push(k * 1_000, vec![reading]));
        }
        closed.extend(live.flush(20_000));
        let want: Vec<_> = closed
            .iter()
            .flat_map(|w| {
                w.windows
                    .iter()
                    .map(|o| o.report("GPU-1::gi9/1g.10gb", w.start_ms, w.end_ms))
            })
            .collect();
        let got: Vec<_> = batches.iter().flat_map(|b| b.windows.clone()).collect();
        assert_eq!(got, want);
        // Held 2 s to 7 s and 9 s to 14 s: 5 + 5 s, in three windows of the 10 s grid (the first
        // observed from 0 s, when the free instance was first scraped).
        let held: Vec<(i64, f64)> = got
            .iter()
            .map(|w| (w.start.timestamp_millis(), w.held_seconds))
            .collect();
        assert_eq!(held, [(0, 5.0), (9_000, 1.0), (10_000, 4.0)]);
        // The batches' periods leave the gap out: presence stops at 7 s and starts again at 9 s.
        let periods: Vec<(i64, i64)> = batches
            .iter()
            .map(|b| {
                (
                    b.period.start.timestamp_millis(),
                    b.period.end.timestamp_millis(),
                )
            })
            .collect();
        assert_eq!(periods, [(0, 7_000), (9_000, 20_000)]);
    }

    #[test]
    fn stored_time_is_left_out_of_a_chunk() {
        let covered = Covered::from([("n1".to_owned(), vec![(0, 9_000), (15_000, 20_000)])]);
        let out = chunk_batches(&scraped(), (0, 20_000), &plan(), &covered);
        let batches = &out.batches["n1"];
        let periods: Vec<(i64, i64)> = batches
            .iter()
            .map(|b| {
                (
                    b.period.start.timestamp_millis(),
                    b.period.end.timestamp_millis(),
                )
            })
            .collect();
        assert_eq!(periods, [(9_000, 15_000)]);
        let held: f64 = batches
            .iter()
            .flat_map(|b| &b.windows)
            .map(|w| w.held_seconds)
            .sum();
        assert_eq!(held, 5.0, "seconds 9 to 13 held, 14 free");
        let all = Covered::from([("n1".to_owned(), vec![(0, 20_000)])]);
        assert!(
            chunk_batches(&scraped(), (0, 20_000), &plan(), &all)
                .batches
                .is_empty()
        );
    }

    #[test]
    fn uncovered_time_is_what_the_stored_periods_leave() {
        assert_eq!(uncovered(0, 10, &[]), [(0, 10)]);
        assert_eq!(uncovered(0, 10, &[(0, 10)]), []);
        assert_eq!(
            uncovered(0, 10, &[(2, 4), (6, 7)]),
            [(0, 2), (4, 6), (7, 10)]
        );
        assert_eq!(uncovered(5, 10, &[(0, 6), (9, 20)]), [(6, 9)]);
        assert_eq!(uncovered(5, 10, &[(0, 2), (12, 20)]), [(5, 10)]);
    }
}
