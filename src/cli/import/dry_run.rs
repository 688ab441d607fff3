//! `import prometheus --dry-run`: what each month would store, and its cost under the current
//! rate card (an estimate from the windows as they are sent; the invoice run prices them exactly).

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde::Deserialize;

use crate::domain::batch::{Batch, SliceReport};

/// What a month would store, for `--dry-run`.
#[derive(Debug, Default)]
pub(super) struct Tally {
    windows: u64,
    gpus: std::collections::BTreeSet<String>,
    present_gpu_seconds: BTreeMap<String, f64>,
    /// Per GPU model: held seconds x share, by kind's isolation factor applied later.
    held_equivalent_seconds: BTreeMap<(String, String), f64>,
}

/// Each slice's share of its GPU (DESIGN.md, Pricing) from the batch's reports; `None` for a
/// time-sliced replica, whose share is measured per window.
fn reserved_share(b: &Batch, slice: &SliceReport, w: (f64, f64)) -> Option<f64> {
    let g = b.gpus.iter().find(|g| g.uuid == slice.gpu_uuid)?;
    let (wc, wm) = w;
    Some(match slice.kind.as_str() {
        "mig" => {
            wc * slice.compute_slices? as f64 / g.compute_slices as f64
                + wm * slice.memory_slices? as f64 / g.memory_slices as f64
        }
        "mps" => {
            wc * slice.active_thread_percentage? as f64 / 100.0
                + wm * slice.pinned_memory_bytes? as f64 / g.memory_bytes as f64
        }
        "vgpu" => slice.fraction?,
        "whole" => 1.0,
        _ => return None,
    })
}

impl Tally {
    pub(super) fn add(&mut self, b: &Batch, weights: (f64, f64)) {
        let seconds = (b.period.end - b.period.start).num_milliseconds() as f64 / 1e3;
        for g in &b.gpus {
            self.gpus.insert(g.uuid.clone());
            *self.present_gpu_seconds.entry(g.model.clone()).or_default() += seconds;
        }
        for w in &b.windows {
            self.windows += 1;
            let Some(slice) = b.slices.iter().find(|s| s.uuid == w.slice_uuid) else {
                continue;
            };
            let Some(g) = b.gpus.iter().find(|g| g.uuid == slice.gpu_uuid) else {
                continue;
            };
            let share = reserved_share(b, slice, weights).unwrap_or_else(|| {
                if w.held_seconds <= 0.0 {
                    return 0.0;
                }
                weights.0 * w.compute_active_seconds.unwrap_or(0.0) / w.held_seconds
                    + weights.1 * w.memory_byte_seconds / (g.memory_bytes as f64 * w.held_seconds)
            });
            *self
                .held_equivalent_seconds
                .entry((g.model.clone(), slice.kind.clone()))
                .or_default() += share * w.held_seconds;
        }
    }
}

/// The fields of a rate card version the dry run prices with (`GET /v1/rate-cards`).
#[derive(Debug, Deserialize)]
pub(super) struct RateCardView {
    pub(super) version: i64,
    currency: String,
    pub(super) weights: crate::domain::slice::ShareWeights,
    isolation_factors: BTreeMap<String, Decimal>,
    default_hourly_cost: Decimal,
    prices: BTreeMap<String, Decimal>,
}

pub(super) fn print_dry_run(months: &BTreeMap<String, Tally>, card: Option<&RateCardView>) {
    use rust_decimal::prelude::FromPrimitive;
    for (month, t) in months {
        println!(
            "{month}: {} GPUs, {} windows would be stored",
            t.gpus.len(),
            t.windows
        );
        let Some(card) = card else { continue };
        let dec = |f: f64| Decimal::from_f64(f).unwrap_or_default();
        let hourly = |model: &str| *card.prices.get(model).unwrap_or(&card.default_hourly_cost);
        let fleet: Decimal = t
            .present_gpu_seconds
            .iter()
            .map(|(m, s)| hourly(m) * dec(*s) / Decimal::from(3600))
            .sum();
        let held: Decimal = t
            .held_equivalent_seconds
            .iter()
            .map(|((m, kind), s)| {
                let factor = card
                    .isolation_factors
                    .get(kind)
                    .copied()
                    .unwrap_or(Decimal::ONE);
                hourly(m) * factor * dec(*s) / Decimal::from(3600)
            })
            .sum();
        let gpu_hours: f64 = t.present_gpu_seconds.values().sum::<f64>() / 3600.0;
        println!(
            "  under rate card version {}: fleet cost {:.2} {} ({:.3} GPU-hours present); slices held {:.2} {}; the rest unallocated or the sharing discount",
            card.version, fleet, card.currency, gpu_hours, held, card.currency,
        );
    }
}
