//! A simulated vLLM's counters, for `slicemeter demo` only (the tests of the unit cost read
//! Debian's real `prometheus`): each pod serving chat with the daily cycle (`chat-api`) counts the
//! tokens it generates, `vllm:generation_tokens_total{namespace, pod, model_name}`, scraped every
//! minute, at a rate that follows its slice's simulated compute activity and size, so that the
//! demo's unit cost has units in the hours its slices have cost. A counter starts again at each
//! 4-hour block of the simulator, as a restarted pod's does; counting takes a reset once.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::workload::{BLOCK_MS, Workload};
use super::{SimFleet, SimSlice};
use crate::collector::import::prometheus::RawSeries;

/// The counter's name, as vLLM exports it.
pub const GENERATION_TOKENS: &str = "vllm:generation_tokens_total";
/// How often the simulated servers are scraped.
pub const SCRAPE_MS: i64 = 60_000;
/// Tokens a second a whole GPU's worth of slice generates when fully busy.
const TOKENS_PER_SECOND: f64 = 2_500.0;
/// The models served, one a slice.
const MODELS: [&str; 3] = [
    "Llama-3.1-8B-Instruct",
    "Mistral-7B-Instruct-v0.3",
    "Qwen2.5-14B-Instruct",
];
/// The memory of the simulator's smallest whole GPU: a slice's size relative to a whole GPU.
const WHOLE_GPU_BYTES: f64 = 80.0 * (1u64 << 30) as f64;

/// A series' labels other than its name, sorted.
type Labels = Vec<(String, String)>;

/// Every serving pod's counter samples with a time in `(after_ms, at_ms]`.
pub fn generation_tokens(fleet: &SimFleet, after_ms: i64, at_ms: i64) -> Vec<RawSeries> {
    let mut series: BTreeMap<Labels, Vec<(i64, f64)>> = BTreeMap::new();
    if at_ms <= after_ms {
        return Vec::new();
    }
    let slices = fleet
        .nodes
        .iter()
        .flat_map(|n| &n.gpus)
        .flat_map(|g| &g.slices);
    for slice in slices {
        for block in SimFleet::block_of(after_ms + 1)..=SimFleet::block_of(at_ms) {
            let plan = fleet.plan(slice, block);
            let Some(consumer) = plan
                .consumer
                .as_ref()
                .filter(|_| plan.workload == Workload::DailyInference)
            else {
                continue;
            };
            let (Some(namespace), Some(pod)) = (&consumer.namespace, &consumer.pod) else {
                continue;
            };
            let labels = vec![
                ("model_name".to_owned(), model_of(slice).to_owned()),
                ("namespace".to_owned(), namespace.clone()),
                ("pod".to_owned(), pod.clone()),
            ];
            let samples = series.entry(labels).or_default();
            let start = block * BLOCK_MS;
            let mut tokens = 0.0;
            for k in 1..=(BLOCK_MS / SCRAPE_MS) {
                let t = start + k * SCRAPE_MS;
                if t > at_ms {
                    break;
                }
                tokens += rate(fleet, slice, &plan, t) * (SCRAPE_MS / 1000) as f64;
                if t > after_ms {
                    samples.push((t, tokens.floor()));
                }
            }
        }
    }
    series
        .into_iter()
        .filter(|(_, samples)| !samples.is_empty())
        .map(|(labels, samples)| RawSeries {
            name: GENERATION_TOKENS.to_owned(),
            labels,
            samples,
        })
        .collect()
}

/// The model `slice` serves.
fn model_of(slice: &SimSlice) -> &'static str {
    MODELS[(slice.id % MODELS.len() as u64) as usize]
}

/// Tokens a second at `t_ms`: the slice's activity times its size.
fn rate(fleet: &SimFleet, slice: &SimSlice, plan: &super::workload::Plan, t_ms: i64) -> f64 {
    let active = f64::from(fleet.reading(slice, plan, t_ms).compute_active_ppm) / 1e6;
    let size = (slice.memory_reserved_bytes as f64 / WHOLE_GPU_BYTES).min(1.0);
    active * size * TOKENS_PER_SECOND
}

/// The counters at their last scrape at or before `now_ms`, as a vLLM's `/metrics` shows them.
pub fn exposition(fleet: &SimFleet, now_ms: i64) -> String {
    let scraped = now_ms.div_euclid(SCRAPE_MS) * SCRAPE_MS;
    let mut out = format!(
        "# HELP {GENERATION_TOKENS} Number of generation tokens processed.\n# TYPE {GENERATION_TOKENS} counter\n"
    );
    for s in generation_tokens(fleet, scraped - SCRAPE_MS, scraped) {
        let labels: Vec<String> = s
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect();
        if let Some((_, v)) = s.samples.last() {
            let _ = writeln!(out, "{GENERATION_TOKENS}{{{}}} {v}", labels.join(","));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_pods_count_up_within_a_block_and_only_chat_pods_count() {
        let fleet = SimFleet::generate(42, 16);
        // A day, from noon: the daily cycle's busy hours.
        let from = 1_790_942_400_000; // 2026-10-02T12:00:00Z
        let series = generation_tokens(&fleet, from, from + 86_400_000);
        assert!(!series.is_empty());
        for s in &series {
            assert!(
                s.labels
                    .iter()
                    .any(|(k, v)| k == "pod" && v.starts_with("chat-api-")),
                "{s:?}"
            );
            for w in s.samples.windows(2) {
                assert!(w[1].0 > w[0].0, "{s:?}");
                // Only at a block's start may it fall: a restart.
                if w[1].1 < w[0].1 {
                    assert_eq!((w[1].0 - SCRAPE_MS).rem_euclid(BLOCK_MS), 0, "{s:?}");
                }
            }
        }
        assert!(series.iter().any(|s| s.samples.last().unwrap().1 > 0.0));
        // The scraped page shows the same counters.
        let page = exposition(&fleet, from + 3_600_000 + 30_000);
        assert!(page.contains("# TYPE vllm:generation_tokens_total counter"));
        assert!(
            page.contains("vllm:generation_tokens_total{model_name=\""),
            "{page}"
        );
    }
}
