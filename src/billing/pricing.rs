//! Pricing, exactly as DESIGN.md says, as pure functions: no database, no HTTP.
//!
//! ```text
//! charge = hourly_cost(model, rate card in force) * share * isolation_factor(kind) * held_seconds / 3600
//! ```
//!
//! Reserved kinds pay `share(s)` for every held second; a time-sliced replica pays its measured share.
//! Amounts stay exact here, as fractions ([`Exact`]); [`super::period`] rounds them once, per
//! invoice line.

use rust_decimal::Decimal;

use super::rate_card::{Currency, PriceSource, RateCard};
use crate::domain::exact::Exact;
use crate::domain::slice::{GpuGeometry, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::usage::{ExactSums, OccupancySums};

/// Occupancy of one (team, GPU model, slice kind, profile) group during the hours one rate card
/// version was in force.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageAggregate {
    pub team: TeamId,
    pub model: String,
    pub kind: SliceKind,
    /// MIG profile name; `None` for other kinds.
    pub profile: Option<String>,
    pub rate_card: i64,
    /// Distinct slices behind the sums.
    pub slices: i64,
    pub sums: OccupancySums,
    /// The share-weighted sums that set the price, exact.
    pub exact: ExactSums,
}

/// The price of one [`UsageAggregate`], exact.
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub team: TeamId,
    pub model: String,
    pub kind: SliceKind,
    pub profile: Option<String>,
    pub rate_card: i64,
    pub price_source: PriceSource,
    pub slices: i64,
    pub windows: i64,
    pub slice_hours: Decimal,
    /// Held hours x physical share: whole GPUs blocked.
    pub gpu_equivalent_hours: Decimal,
    /// The busy part of it; `None` when compute activity was not measured.
    pub used_gpu_equivalent_hours: Option<Decimal>,
    /// Price of one GPU-equivalent hour: the model's hourly cost x the kind's isolation factor.
    pub unit_price: Decimal,
    /// GPU-equivalent hours x unit price, exact.
    pub amount: Exact,
    /// What the blocked share costs at factor 1: the part of the fleet cost this group takes.
    pub allocated: Exact,
}

impl Charge {
    /// The sharing discount: the `(1 - factor)` part the platform carries.
    pub fn discount(&self) -> Exact {
        &self.allocated - &self.amount
    }

    /// Used over held GPU-equivalent hours, if known.
    pub fn efficiency(&self) -> Option<Decimal> {
        let used = self.used_gpu_equivalent_hours?;
        // At most 1: the busy part and the whole are reckoned apart, and may differ in their last digit.
        (self.gpu_equivalent_hours > Decimal::ZERO)
            .then(|| (used / self.gpu_equivalent_hours).min(Decimal::ONE))
    }

    /// What the idle part of the blocked capacity cost, if known.
    pub fn idle_cost(&self) -> Option<Decimal> {
        Some(self.amount.to_decimal() * (Decimal::ONE - self.efficiency().unwrap_or(Decimal::ONE)))
            .filter(|_| self.used_gpu_equivalent_hours.is_some())
    }
}

const HOUR: Decimal = Decimal::from_parts(3600, 0, 0, false, 0);

/// Prices one group under its rate card.
pub fn price(u: &UsageAggregate, card: &RateCard) -> Charge {
    let reserved = u.kind.is_reserved();
    let held_eq = held_hours(&u.exact, u.kind, card);
    let gpu_equivalent_hours = held_eq.to_decimal();
    // What a time-sliced replica blocks is what it used; a reserved slice's busy part is shown,
    // not priced.
    let used_eq = if reserved {
        u.sums
            .used_equivalent(true, &card.weights)
            .map(|s| s / HOUR)
    } else {
        Some(gpu_equivalent_hours)
    };
    let (hourly_cost, price_source) = card.hourly_cost(&u.model);
    let unit_price = hourly_cost * card.factors.of(u.kind);
    Charge {
        team: u.team.clone(),
        model: u.model.clone(),
        kind: u.kind,
        profile: u.profile.clone(),
        rate_card: card.id,
        price_source,
        slices: u.slices,
        windows: u.sums.windows,
        slice_hours: u.sums.held_seconds / HOUR,
        gpu_equivalent_hours,
        used_gpu_equivalent_hours: used_eq,
        unit_price,
        amount: &held_eq * unit_price,
        allocated: held_eq * hourly_cost,
    }
}

/// [`price`]'s amount alone, for readers that price rows by the million and need no other figure
/// of the charge (the unit cost's pod-hours): the same exact amount, without the rounded hours,
/// the busy part and the names a [`Charge`] carries.
pub fn amount(exact: &ExactSums, model: &str, kind: SliceKind, card: &RateCard) -> Exact {
    exact.held_equivalent(kind.is_reserved(), &card.weights) * second_price(model, kind, card)
}

/// What one GPU-equivalent second of `model` and `kind` costs under `card`, exact: [`amount`] is a
/// slice's GPU-equivalent seconds times it, so that the rows of one invoice line may be priced
/// together, once.
pub fn second_price(model: &str, kind: SliceKind, card: &RateCard) -> Exact {
    Exact::from(card.hourly_cost(model).0 * card.factors.of(kind)) / HOUR
}

/// GPU-equivalent hours blocked, exact: what a charge's amount is the unit price of.
fn held_hours(exact: &ExactSums, kind: SliceKind, card: &RateCard) -> Exact {
    exact.held_equivalent(kind.is_reserved(), &card.weights) / HOUR
}

/// The seconds GPUs of one model were present while one rate card version was in force, and what
/// their layouts stranded in that time.
#[derive(Debug, Clone, PartialEq)]
pub struct PresenceAggregate {
    pub model: String,
    pub rate_card: i64,
    pub present_seconds: Decimal,
    pub stranded: StrandedSeconds,
}

/// What GPUs' layouts stranded (DESIGN.md, "Stranded capacity and the per-card ledger"), as seconds
/// of a whole GPU's compute and of its memory, exact: one MIG compute slice of seven stranded for an
/// hour is 3600/7 compute-seconds. Rate card free, so that any version's weights price it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StrandedSeconds {
    pub compute: Exact,
    pub memory: Exact,
}

impl StrandedSeconds {
    /// The stranded seconds ingest records for a GPU of `geometry` (migration 0025), in its units:
    /// MIG compute and memory slices, MPS thread percent and pinned memory bytes, each times seconds.
    pub fn of_gpu(
        geometry: &GpuGeometry,
        compute_slice_seconds: Decimal,
        memory_slice_seconds: Decimal,
        thread_percent_seconds: Decimal,
        memory_byte_seconds: Decimal,
    ) -> StrandedSeconds {
        let per = |n: u64| Exact::from(i64::try_from(n).unwrap_or(i64::MAX).max(1));
        StrandedSeconds {
            compute: Exact::from(compute_slice_seconds) / per(geometry.compute_slices.into())
                + Exact::from(thread_percent_seconds) / per(100),
            memory: Exact::from(memory_slice_seconds) / per(geometry.memory_slices.into())
                + Exact::from(memory_byte_seconds) / per(geometry.memory_bytes),
        }
    }

    pub fn add(&mut self, other: &StrandedSeconds) {
        self.compute += &other.compute;
        self.memory += &other.memory;
    }
}

/// What those GPU-seconds cost, exact: the fleet cost that every charge is a part of.
pub fn fleet_cost(p: &PresenceAggregate, card: &RateCard) -> (Exact, PriceSource) {
    let (hourly_cost, source) = card.hourly_cost(&p.model);
    (Exact::from(p.present_seconds) * hourly_cost / HOUR, source)
}

/// What the stranded part of GPUs of `model` costs, exact, with the share weights of `card`, as a
/// slice that reserved it would (at isolation factor 1: it is part of unallocated capacity, which
/// is the fleet cost less what slices blocked).
pub fn stranded_cost(model: &str, stranded: &StrandedSeconds, card: &RateCard) -> Exact {
    let (hourly_cost, _) = card.hourly_cost(model);
    let w = &card.weights;
    (Exact::from(w.compute) * &stranded.compute + Exact::from(w.memory) * &stranded.memory)
        * hourly_cost
        / HOUR
}

/// Rounds a stream of exact amounts so that every prefix sums to the rounded prefix total, and the
/// whole group to a given target: each row is off its own exact amount by less than one minor unit,
/// and only the running total is kept, whatever the number of rows.
#[derive(Debug)]
pub struct CarryRounder {
    exact: Exact,
    emitted: Decimal,
}

impl CarryRounder {
    pub fn new() -> Self {
        CarryRounder {
            exact: Exact::zero(),
            emitted: Decimal::ZERO,
        }
    }

    /// The rounded amount of the next row.
    pub fn next(&mut self, exact: impl Into<Exact>, currency: &Currency) -> Decimal {
        self.exact += exact.into();
        let amount = currency.round(self.exact.clone()) - self.emitted;
        self.emitted += amount;
        amount
    }

    /// The last row of a group: whatever makes the group sum to `target`.
    pub fn last(&mut self, exact: impl Into<Exact>, target: Decimal) -> Decimal {
        self.exact += exact.into();
        let amount = target - self.emitted;
        self.emitted = target;
        amount
    }
}

impl Default for CarryRounder {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use rust_decimal_macros::dec;

    use super::*;
    use crate::billing::rate_card::{Currency, IdlePolicy, IsolationFactors};
    use crate::domain::slice::{GpuGeometry, Reservation, ShareWeights};

    pub(crate) fn card() -> RateCard {
        RateCard {
            id: 1,
            effective_from: "2026-01-01T00:00:00Z".parse().unwrap(),
            currency: Currency::parse("USD").unwrap(),
            weights: ShareWeights::default(),
            factors: IsolationFactors::default(),
            idle_policy: IdlePolicy::Platform,
            prices: BTreeMap::from([
                ("NVIDIA H100 80GB HBM3".to_owned(), dec!(4.00)),
                ("NVIDIA H200".to_owned(), dec!(5.20)),
            ]),
            default_hourly_cost: dec!(3.00),
            note: None,
        }
    }

    const H100: GpuGeometry = GpuGeometry {
        memory_bytes: 85_520_809_984,
        compute_slices: 7,
        memory_slices: 8,
    };
    const H200: GpuGeometry = GpuGeometry {
        memory_bytes: 150_754_820_096,
        compute_slices: 7,
        memory_slices: 8,
    };

    /// A slice of `reservation` held for `hours`, idle, as rollup sums.
    fn held(
        reservation: &Reservation,
        gpu: &GpuGeometry,
        model: &str,
        hours: i64,
    ) -> UsageAggregate {
        let share = reservation.physical_share(gpu);
        let held = Decimal::from(hours * 3600);
        UsageAggregate {
            team: TeamId::parse("nlp").unwrap(),
            model: model.into(),
            kind: reservation.kind(),
            profile: match reservation {
                Reservation::Mig { profile, .. } => Some(profile.clone()),
                _ => None,
            },
            rate_card: 1,
            slices: 1,
            exact: ExactSums::of_share(&held.into(), &Exact::zero(), &Exact::zero(), &share),
            sums: OccupancySums {
                held_seconds: held,
                held_compute: held * share.compute,
                held_memory: held * share.memory,
                known_seconds: held,
                known_compute: held * share.compute,
                windows: hours * 60,
                ..Default::default()
            },
        }
    }

    fn mig(model: &str, profile: &str) -> Reservation {
        let p = crate::domain::profiles::by_name(model, profile).unwrap();
        Reservation::Mig {
            profile: p.profile.clone(),
            profile_id: Some(p.profile_id),
            compute_slices: p.compute_slices,
            memory_slices: p.memory_slices,
            memory_bytes: p.memory_bytes(),
        }
    }

    /// The charge for 720 held hours, rounded to cents for the table below.
    fn month(r: &Reservation, gpu: &GpuGeometry, model: &str) -> Decimal {
        price(&held(r, gpu, model, 720), &card())
            .amount
            .round(card().currency.minor_units)
    }

    #[test]
    fn the_worked_example_prices_to_the_cent() {
        let h100 = "NVIDIA H100 80GB HBM3";
        assert_eq!(
            month(&mig("H100-SXM5-80GB", "3g.40gb"), &H100, h100),
            dec!(1337.14)
        );
        assert_eq!(
            month(&mig("H100-SXM5-80GB", "1g.10gb"), &H100, h100),
            dec!(385.71)
        );
    }

    #[test]
    fn every_mig_profile_of_the_h100_and_h200_tables_prices_by_its_slices() {
        // share = 0.5 * c/7 + 0.5 * m/8; a month = 720 h at 4.00 (H100) or 5.20 (H200).
        let cases = [
            ("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", &H100, dec!(4.00)),
            ("H200-141GB", "NVIDIA H200", &H200, dec!(5.20)),
        ];
        let mut seen = 0;
        for (table, model, gpu, cost) in cases {
            for p in crate::domain::profiles::of_model(table) {
                let r = mig(table, &p.profile);
                let share = dec!(0.5) * Decimal::from(p.compute_slices) / dec!(7)
                    + dec!(0.5) * Decimal::from(p.memory_slices) / dec!(8);
                let want = card().currency.round(cost * share * dec!(720));
                assert_eq!(month(&r, gpu, model), want, "{table} {}", p.profile);
                seen += 1;
            }
        }
        assert_eq!(seen, 14);
        // Spot checks against hand arithmetic.
        assert_eq!(
            month(
                &mig("H100-SXM5-80GB", "7g.80gb"),
                &H100,
                "NVIDIA H100 80GB HBM3"
            ),
            dec!(2880.00)
        );
        assert_eq!(
            month(&mig("H200-141GB", "2g.35gb"), &H200, "NVIDIA H200"),
            dec!(1002.86)
        );
    }

    #[test]
    fn whole_mps_and_vgpu_slices_price_by_their_reservation_and_factor() {
        let h100 = "NVIDIA H100 80GB HBM3";
        assert_eq!(month(&Reservation::Whole, &H100, h100), dec!(2880.00));
        // MPS at 25 % of the threads with 20 GiB pinned, factor 0.90.
        let mps = Reservation::Mps {
            active_thread_percentage: 25,
            pinned_memory_bytes: 20 << 30,
        };
        let share =
            dec!(0.125) + dec!(0.5) * Decimal::from(20u64 << 30) / Decimal::from(H100.memory_bytes);
        assert_eq!(
            month(&mps, &H100, h100),
            card()
                .currency
                .round(dec!(4) * share * dec!(720) * dec!(0.9))
        );
        assert_eq!(month(&mps, &H100, h100), dec!(649.43));
        let vgpu = Reservation::Vgpu {
            fraction: dec!(0.25),
        };
        assert_eq!(month(&vgpu, &H100, h100), dec!(648.00));
    }

    #[test]
    fn a_time_sliced_replica_pays_its_measured_share_at_the_timeslice_factor() {
        // Held 720 h, a fifth of the GPU's SMs busy on average and 16 GiB of the H100's memory used.
        let held = dec!(720) * dec!(3600);
        let memory_bytes_seconds = Decimal::from(16u64 << 30) * held;
        let u = UsageAggregate {
            team: TeamId::parse("vision").unwrap(),
            model: "NVIDIA H100 80GB HBM3".into(),
            kind: SliceKind::Timeslice,
            profile: None,
            rate_card: 1,
            slices: 1,
            exact: ExactSums::of_share(
                &held.into(),
                &(held / dec!(5)).into(),
                &memory_bytes_seconds.into(),
                &crate::domain::slice::PhysicalShare {
                    kind: SliceKind::Timeslice,
                    compute: Decimal::ONE,
                    memory: Decimal::ONE,
                    memory_reserved_bytes: H100.memory_bytes,
                },
            ),
            sums: OccupancySums {
                held_seconds: held,
                held_compute: held,
                held_memory: held,
                known_seconds: held,
                known_compute: held,
                compute_active_seconds: held / dec!(5),
                active_compute: held / dec!(5),
                memory_used: memory_bytes_seconds / Decimal::from(H100.memory_bytes),
                ..Default::default()
            },
        };
        let c = price(&u, &card());
        let share = dec!(0.5) * dec!(0.2)
            + dec!(0.5) * Decimal::from(16u64 << 30) / Decimal::from(H100.memory_bytes);
        assert_eq!(
            c.gpu_equivalent_hours.round_dp(9),
            (share * dec!(720)).round_dp(9)
        );
        assert_eq!(c.unit_price, dec!(3.0000));
        assert_eq!(c.amount.round(2), dec!(432.96));
        assert_eq!(c.efficiency(), Some(Decimal::ONE));
        assert_eq!(c.discount(), &c.allocated / dec!(4));
    }

    #[test]
    fn an_unknown_model_is_priced_at_the_default_and_says_so() {
        let c = price(&held(&Reservation::Whole, &H100, "Tesla T4", 10), &card());
        assert_eq!(c.price_source, PriceSource::Default);
        assert_eq!(c.amount, Exact::from(dec!(30.00)));
        let listed = price(
            &held(&Reservation::Whole, &H100, "NVIDIA H100 80GB HBM3", 10),
            &card(),
        );
        assert_eq!(listed.price_source, PriceSource::Listed);
    }

    #[test]
    fn fleet_cost_counts_every_present_gpu_hour() {
        let p = PresenceAggregate {
            model: "NVIDIA H100 80GB HBM3".into(),
            rate_card: 1,
            present_seconds: dec!(720) * dec!(3600),
            stranded: Default::default(),
        };
        assert_eq!(
            fleet_cost(&p, &card()),
            (Exact::from(2880), PriceSource::Listed)
        );
    }
}
