//! What a model's layouts strand, today and in the plan: the capacity of its MIG cards that no slice
//! holds and no profile can take (`domain::layout::stranded_mig`, the figure billing splits
//! unallocated capacity by), priced as billing prices it (`billing::pricing::stranded_cost`: the
//! rate card's share weights x the card's hourly cost) for a month of 730 hours.

use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;

use crate::billing::pricing::{StrandedSeconds, stranded_cost};
use crate::billing::rate_card::RateCard;
use crate::domain::exact::Exact;
use crate::domain::layout::stranded_mig;
use crate::domain::profiles::Instance;
use crate::domain::slice::ShareWeights;
use crate::domain::time::AVERAGE_MONTH_HOURS;

/// What a model's cards strand, summed over them, and what that costs a month.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct StrandedCapacity {
    /// MIG compute slices no profile can take beside the instances there.
    pub compute_slices: u32,
    /// MIG memory slices no profile can take.
    pub memory_slices: u32,
    /// The compute slices of the cards counted (today's, or those the plan keeps).
    pub total_compute_slices: u32,
    /// Their memory slices.
    pub total_memory_slices: u32,
    /// The same in cards, weighed as billing weighs a slice: compute weight x compute slices / a
    /// card's + memory weight x memory slices / a card's (the rate card's weights; 0.5 each
    /// without one), to 6 places.
    pub gpu_equivalents: Decimal,
    /// What it costs for 730 hours at the model's hourly cost under the rate card in force,
    /// rounded once to the currency's minor unit, half to even; none without a rate card.
    pub monthly_cost: Option<Decimal>,
}

impl StrandedCapacity {
    /// `3 compute slices, 0.21 GPU, USD 625.71 a month`; `none` when nothing is stranded: the
    /// plan page's words and the CLI's, with their own ways of writing a number (`number(x, places)`)
    /// and an amount.
    pub fn describe(
        &self,
        number: impl Fn(Decimal, u32) -> String,
        money: impl Fn(Decimal) -> String,
    ) -> String {
        let plural =
            |n: u32, what: &str| format!("{n} {what} slice{}", if n == 1 { "" } else { "s" });
        let mut parts = Vec::new();
        if self.compute_slices > 0 {
            parts.push(plural(self.compute_slices, "compute"));
        }
        if self.memory_slices > 0 {
            parts.push(plural(self.memory_slices, "memory"));
        }
        if parts.is_empty() {
            return "none".to_owned();
        }
        parts.push(format!("{} GPU", number(self.gpu_equivalents, 2)));
        if let Some(cost) = self.monthly_cost {
            parts.push(format!("{} a month", money(cost)));
        }
        parts.join(", ")
    }
}

/// What `layouts` (each card's MIG instances, as compute and memory slices) strand on cards of
/// `total_compute`/`total_memory` slices of `model`, priced with `rate_card`.
pub fn stranded_capacity(
    model: &str,
    layouts: impl IntoIterator<Item = impl IntoIterator<Item = (u8, u8)>>,
    total_compute: u8,
    total_memory: u8,
    rate_card: Option<&RateCard>,
) -> StrandedCapacity {
    let (mut compute_slices, mut memory_slices, mut cards) = (0u32, 0u32, 0u32);
    for l in layouts {
        cards += 1;
        let instances: Vec<Instance> = l
            .into_iter()
            .map(|(compute_slices, memory_slices)| Instance {
                compute_slices,
                memory_slices,
            })
            .collect();
        let s = stranded_mig(&instances, total_compute, total_memory);
        compute_slices += u32::from(s.compute_slices);
        memory_slices += u32::from(s.memory_slices);
    }
    // A compute slice stranded for a second is 1/compute_slices of a card's compute-second, as
    // ingest records it (`StrandedSeconds::of_gpu`).
    let share = |slices: u32, of: u8| Exact::ratio(i64::from(slices), i64::from(of.max(1)));
    let weights = weights(rate_card);
    let gpu_equivalents = (Exact::from(weights.compute) * share(compute_slices, total_compute)
        + Exact::from(weights.memory) * share(memory_slices, total_memory))
    .round(6);
    let month = Exact::from(i64::from(AVERAGE_MONTH_HOURS) * 3600);
    let monthly_cost = rate_card.map(|card| {
        let seconds = StrandedSeconds {
            compute: share(compute_slices, total_compute) * &month,
            memory: share(memory_slices, total_memory) * &month,
        };
        card.currency.round(stranded_cost(model, &seconds, card))
    });
    StrandedCapacity {
        compute_slices,
        memory_slices,
        total_compute_slices: cards * u32::from(total_compute),
        total_memory_slices: cards * u32::from(total_memory),
        gpu_equivalents,
        monthly_cost,
    }
}

/// The weights the packer weighs stranding with: the rate card's, or the default's.
pub fn weights(rate_card: Option<&RateCard>) -> ShareWeights {
    rate_card.map(|c| c.weights).unwrap_or_default()
}
