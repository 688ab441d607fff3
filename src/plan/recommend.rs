//! Right-sizing (DESIGN.md, Right-sizing and planning): for each workload and the slice it holds,
//! the smallest MIG profile of the same GPU model that fits its memory and compute need, "give it
//! back" for a slice held with no compute at all, and what the change is worth a month at today's
//! rate card.
//!
//! Evidence comes from the hourly rollups: memory need is the p99 of the hours' peak memory (each
//! hour's peak is the highest of its windows', so this p99 is never below the windows' own) x 1.15,
//! never below the highest peak seen; compute need is the p95 of the hours' compute-active
//! fraction x the slice's compute slices / the target utilisation of the profile asked for. The
//! days of data are the span from the first hour held to the end of the last, and the monthly
//! figures scale the held hours of that span to 730 hours.

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::Serialize;
use utoipa::ToSchema;

use super::store::Evidence;
use crate::billing::rate_card::RateCard;
use crate::domain::profiles::{self, MigProfile};
use crate::domain::slice::{ShareWeights, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::time::AVERAGE_MONTH_HOURS;
use crate::domain::usage::IDLE_FRACTION;

/// Headroom on the p99 of peak memory.
const MEMORY_HEADROOM: f64 = 1.15;
/// Days of data a recommendation needs; under 14 its confidence is medium.
const MIN_DAYS: i64 = 7;
const HIGH_DAYS: i64 = 14;

/// How busy a workload's slice should be: the share of its compute need it may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetProfile {
    /// 0.7.
    Default,
    /// 0.8: development may run hot.
    Dev,
    /// 0.65.
    Prod,
    /// 0.5: room to take a failed peer's load.
    Ha,
}

impl TargetProfile {
    pub fn utilisation(self) -> f64 {
        match self {
            TargetProfile::Default => 0.7,
            TargetProfile::Dev => 0.8,
            TargetProfile::Prod => 0.65,
            TargetProfile::Ha => 0.5,
        }
    }

    pub fn parse(s: &str) -> Option<TargetProfile> {
        Some(match s {
            "default" => TargetProfile::Default,
            "dev" => TargetProfile::Dev,
            "prod" => TargetProfile::Prod,
            "ha" => TargetProfile::Ha,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Today's slice is the smallest that fits.
    Keep,
    /// A smaller (or, when the workload is short of memory or compute, a larger) profile.
    Resize,
    /// Held with no compute all the time: release it.
    GiveBack,
    /// A time-sliced replica reserves nothing and pays for what it uses: nothing to resize.
    PayPerUse,
    /// Fewer than 7 days of data: no recommendation yet.
    Wait,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Under 7 days of data.
    Low,
    /// 7 to 13 days.
    Medium,
    /// 14 days or more.
    High,
}

/// One workload's slices of one kind and profile, and what they should be.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Recommendation {
    #[schema(value_type = String)]
    pub team: TeamId,
    pub namespace: Option<String>,
    /// `Deployment`, `StatefulSet`, `Job`, `Pod`, `Workload` (a `slicemeter.io/workload` label) or
    /// `User`.
    pub workload_kind: String,
    pub workload: String,
    pub gpu_model: String,
    #[schema(value_type = String, example = "mig")]
    pub kind: SliceKind,
    /// Today's MIG profile, if a MIG instance.
    pub profile: Option<String>,
    /// Slices of the workload behind these figures.
    pub slices: i64,
    pub action: Action,
    /// The profile to move to (`resize`).
    pub recommended_profile: Option<String>,
    pub confidence: Confidence,
    pub days_of_data: i64,
    /// p99 of the hours' peak memory, in bytes.
    pub memory_p99_bytes: i64,
    pub memory_max_bytes: i64,
    /// p99 x 1.15, never below the highest peak.
    pub memory_need_bytes: i64,
    pub memory_reserved_bytes: i64,
    /// p95 of the hours' compute-active fraction of the slice; none where not measured.
    pub compute_p95: Option<f64>,
    /// Compute-active seconds over the measured seconds of the days of data: how busy the slice
    /// was on average; none where not measured.
    pub compute_busy: Option<f64>,
    /// In compute slices: p95 x the slice's compute slices / target utilisation.
    pub compute_need_slices: Option<f64>,
    /// Today's monthly charge for these slices (held hours of the data, scaled to 730 a month),
    /// rounded as an invoice line is; none without a rate card in force.
    pub monthly_today: Option<Decimal>,
    /// The same hours on the recommended profile (0 to give back).
    pub monthly_recommended: Option<Decimal>,
    /// `monthly_today - monthly_recommended`: what the team saves a month (negative: pays more).
    pub monthly_delta: Option<Decimal>,
    /// Why, in a sentence.
    pub reason: String,
    /// Sharing the card under MPS instead, where the target allows less isolation than MIG's
    /// (`default`, `dev`) and that costs less than the recommended slice.
    pub shared_alternative: Option<SharedAlternative>,
    /// `wait`: what the days of data so far advise, to be confirmed once there are 7.
    pub so_far: Option<SoFar>,
}

/// What a workload with fewer than 7 days of data would be advised on the days it has: the
/// same rules, not yet a recommendation.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SoFar {
    /// `keep`, `resize` or `give_back`.
    pub action: Action,
    /// The profile to move to (`resize`).
    pub recommended_profile: Option<String>,
    /// What it would save a month (negative: cost more); none without a rate card in force.
    pub monthly_delta: Option<Decimal>,
    /// Sharing the card under MPS instead, as for a recommendation.
    pub shared_alternative: Option<SharedAlternative>,
}

/// An MPS share sized to the workload's need: its thread percentage covers the compute need, its
/// pinned memory the memory need. MPS isolates less than MIG (no memory or fault isolation), which
/// the rate card's lower MPS factor prices.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SharedAlternative {
    #[schema(value_type = String, example = "mps")]
    pub kind: SliceKind,
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`.
    pub active_thread_percentage: u8,
    /// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, whole GiB.
    pub pinned_memory_bytes: i64,
    /// The same hours under this share, rounded as an invoice line is.
    pub monthly: Decimal,
    /// `monthly_today - monthly`.
    pub monthly_delta: Decimal,
}

/// What the evidence says, priced by `card` (the rate card in force), for `target`.
// long: right-sizing's rules in the order docs/planning.md lists them, each reading the needs
// computed before it
pub fn recommend(e: &Evidence, card: Option<&RateCard>, target: TargetProfile) -> Recommendation {
    let kind = e.kind;
    let confidence = match e.days {
        d if d < MIN_DAYS => Confidence::Low,
        d if d < HIGH_DAYS => Confidence::Medium,
        _ => Confidence::High,
    };
    let memory_need =
        ((e.memory_p99_bytes as f64 * MEMORY_HEADROOM).ceil() as i64).max(e.memory_max_bytes);
    let compute_need = e.compute_p95.map(|p| {
        p * e.compute_share_f64() * f64::from(e.gpu_compute_slices) / target.utilisation()
    });
    let idle = e.known_seconds > Decimal::ZERO
        && e.compute_active_seconds <= e.known_seconds * IDLE_FRACTION;

    let table = profiles::table_model(&e.model);
    let (action, recommended, reason): (Action, Option<&MigProfile>, String) = if kind
        == SliceKind::Timeslice
    {
        (
            Action::PayPerUse,
            None,
            "a time-sliced replica reserves nothing: it pays for the compute and memory it uses"
                .into(),
        )
    } else if idle {
        (
            Action::GiveBack,
            None,
            format!("held {} days with no compute activity", e.days),
        )
    } else {
        match (table, compute_need) {
            (None, _) => (
                Action::Keep,
                None,
                format!("no MIG profile table for {}", e.model),
            ),
            (Some(_), None) => (
                Action::Keep,
                None,
                "compute activity was not measured".into(),
            ),
            (Some(t), Some(need)) => match smallest_fit(t, memory_need, need, card) {
                None => (
                    Action::Keep,
                    None,
                    "no MIG profile holds its memory and compute need".into(),
                ),
                Some(p) if e.profile.as_deref() == Some(p.profile.as_str()) => (
                    Action::Keep,
                    None,
                    format!("{} is the smallest profile that fits", p.profile),
                ),
                // Off MIG, a profile is advice only when it blocks less than the slice does.
                Some(p)
                    if kind != SliceKind::Mig
                        && card.is_some_and(|c| {
                            profile_share(p, &c.weights)
                                >= c.weights.weigh(e.compute_share, e.memory_share)
                        }) =>
                {
                    (
                        Action::Keep,
                        None,
                        format!(
                            "the smallest MIG profile that fits, {}, blocks no less than this {}",
                            p.profile,
                            kind.as_str()
                        ),
                    )
                }
                Some(p) => (
                    Action::Resize,
                    Some(p),
                    format!(
                        "needs {:.1} GiB and {:.2} compute slices; {} has {} GiB and {}",
                        memory_need as f64 / f64::from(1u32 << 30),
                        need,
                        p.profile,
                        p.memory_gib,
                        p.compute_slices
                    ),
                ),
            },
        }
    };

    // Under 7 days the advice waits; what the days so far point to is said beside it.
    let (action, judged, recommended, reason) = if kind != SliceKind::Timeslice && e.days < MIN_DAYS
    {
        (
            Action::Wait,
            Some((action, recommended)),
            None,
            format!("{} days of data; a recommendation needs {MIN_DAYS}", e.days),
        )
    } else {
        (action, None, recommended, reason)
    };

    // The lines, as an invoice would round them, over the held hours scaled to a month.
    let monthly_hours = (e.span_seconds > 0).then(|| {
        e.held_seconds * Decimal::from(AVERAGE_MONTH_HOURS) / Decimal::from(e.span_seconds)
    });
    let priced = card.zip(monthly_hours).filter(|_| kind.is_reserved());
    let line = |card: &RateCard, share: Decimal, kind: SliceKind, hours: Decimal| {
        let cost = card.hourly_cost(&e.model).0 * card.factors.of(kind);
        card.currency.round(cost * share * hours)
    };
    let monthly_today =
        priced.map(|(c, h)| line(c, c.weights.weigh(e.compute_share, e.memory_share), kind, h));
    let monthly_of = |action: Action, recommended: Option<&MigProfile>| {
        priced.and_then(|(c, h)| match action {
            Action::GiveBack => Some(Decimal::ZERO),
            Action::Resize => {
                recommended.map(|p| line(c, profile_share(p, &c.weights), SliceKind::Mig, h))
            }
            Action::Keep => monthly_today,
            Action::Wait | Action::PayPerUse => None,
        })
    };
    // Sharing the card under MPS, sized to the need, where it costs less than what `action`
    // leaves the workload paying.
    let shared_of = |action: Action, recommended: Option<Decimal>| {
        priced
            .zip(compute_need)
            .filter(|_| matches!(target, TargetProfile::Default | TargetProfile::Dev))
            .filter(|_| matches!(action, Action::Keep | Action::Resize))
            .and_then(|((c, h), need)| {
                let threads = (need / f64::from(e.gpu_compute_slices.max(1)) * 100.0)
                    .ceil()
                    .clamp(1.0, 100.0) as u8;
                let gib = 1i64 << 30;
                let pinned = (memory_need + gib - 1) / gib * gib;
                if pinned >= e.gpu_memory_bytes {
                    return None;
                }
                let share = c.weights.weigh(
                    Decimal::from(threads) / Decimal::ONE_HUNDRED,
                    Decimal::from(pinned) / Decimal::from(e.gpu_memory_bytes),
                );
                let monthly = line(c, share, SliceKind::Mps, h);
                let today = monthly_today?;
                (monthly < recommended.unwrap_or(today)).then(|| SharedAlternative {
                    kind: SliceKind::Mps,
                    active_thread_percentage: threads,
                    pinned_memory_bytes: pinned,
                    monthly,
                    monthly_delta: today - monthly,
                })
            })
    };
    let monthly_recommended = monthly_of(action, recommended);
    let shared_alternative = shared_of(action, monthly_recommended);
    let so_far = judged.map(|(action, p)| {
        let recommended = monthly_of(action, p);
        SoFar {
            action,
            recommended_profile: p.map(|p| p.profile.clone()),
            monthly_delta: monthly_today.zip(recommended).map(|(a, b)| a - b),
            shared_alternative: shared_of(action, recommended),
        }
    });
    Recommendation {
        team: e.team.clone(),
        namespace: e.namespace.clone(),
        workload_kind: e.workload_kind.clone(),
        workload: e.workload.clone(),
        gpu_model: e.model.clone(),
        kind,
        profile: e.profile.clone(),
        slices: e.slices,
        action,
        recommended_profile: recommended.map(|p| p.profile.clone()),
        confidence,
        days_of_data: e.days,
        memory_p99_bytes: e.memory_p99_bytes,
        memory_max_bytes: e.memory_max_bytes,
        memory_need_bytes: memory_need,
        memory_reserved_bytes: e.memory_reserved_bytes,
        compute_p95: e.compute_p95,
        compute_busy: (e.known_seconds > Decimal::ZERO)
            .then(|| (e.compute_active_seconds / e.known_seconds).to_f64())
            .flatten(),
        compute_need_slices: compute_need,
        monthly_delta: monthly_today.zip(monthly_recommended).map(|(a, b)| a - b),
        monthly_today,
        monthly_recommended,
        reason,
        shared_alternative,
        so_far,
    }
}

/// A MIG profile's share of its card under `weights`.
fn profile_share(p: &MigProfile, weights: &ShareWeights) -> Decimal {
    weights.weigh(
        Decimal::from(p.compute_slices) / Decimal::from(p.total_compute_slices),
        Decimal::from(p.memory_slices) / Decimal::from(p.total_memory_slices),
    )
}

/// The cheapest profile of the table model (by share; then fewer memory, then compute slices)
/// with the memory and compute slices needed. Media-extension variants are left out: they are the
/// same size and there is one a card.
fn smallest_fit(
    table_model: &str,
    memory_need: i64,
    compute_need: f64,
    card: Option<&RateCard>,
) -> Option<&'static MigProfile> {
    let weights = card.map(|c| c.weights).unwrap_or_default();
    profiles::of_model(table_model)
        .filter(|p| !p.profile.ends_with("+me"))
        .filter(|p| i64::try_from(p.memory_bytes()).unwrap_or(i64::MAX) >= memory_need)
        .filter(|p| f64::from(p.compute_slices) >= compute_need)
        .min_by_key(|p| {
            (
                profile_share(p, &weights),
                p.memory_slices,
                p.compute_slices,
            )
        })
}

#[cfg(test)]
mod tests {
    use rust_decimal::prelude::FromPrimitive;
    use rust_decimal_macros::dec;

    use super::*;
    use crate::billing::pricing::tests::card;

    const GIB: i64 = 1 << 30;

    /// An H100 slice held all of 14 days by one workload.
    fn held(
        kind: SliceKind,
        profile: Option<&str>,
        c: u8,
        m: u8,
        peak_gib: i64,
        busy: f64,
    ) -> Evidence {
        let held = Decimal::from(14 * 86_400);
        Evidence {
            team: TeamId::parse("nlp").unwrap(),
            namespace: Some("nlp".into()),
            workload_kind: "Deployment".into(),
            workload: "embedder".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            kind,
            profile: profile.map(str::to_owned),
            compute_share: Decimal::from(c) / Decimal::from(7),
            memory_share: Decimal::from(m) / Decimal::from(8),
            memory_reserved_bytes: 80 * GIB * i64::from(m) / 8,
            gpu_compute_slices: 7,
            gpu_memory_bytes: 85_520_809_984,
            slices: 1,
            span_seconds: 14 * 86_400,
            days: 14,
            held_seconds: held,
            known_seconds: held,
            compute_active_seconds: held * Decimal::from_f64(busy).unwrap(),
            memory_p99_bytes: peak_gib * GIB,
            memory_max_bytes: peak_gib * GIB,
            compute_p95: Some(busy),
        }
    }

    #[test]
    fn a_squeezed_instance_is_told_to_grow_and_what_it_costs_more() {
        // A 1g.10gb at 9 GiB: it needs 10.35 GiB with headroom; a 1g.20gb holds it.
        let r = recommend(
            &held(SliceKind::Mig, Some("1g.10gb"), 1, 1, 9, 0.3),
            Some(&card()),
            TargetProfile::Default,
        );
        assert_eq!(r.action, Action::Resize);
        assert_eq!(r.recommended_profile.as_deref(), Some("1g.20gb"));
        assert!(r.monthly_delta.unwrap() < Decimal::ZERO, "{r:?}");
        // 4.00 x (1/7 + 1/8)/2 x 730 = 391.07 today; 4.00 x (1/7 + 2/8)/2 x 730 = 573.57.
        assert_eq!(r.monthly_today, Some(dec!(391.07)));
        assert_eq!(r.monthly_delta, Some(dec!(-182.50)));
    }

    #[test]
    fn off_mig_a_profile_is_advice_only_when_it_blocks_less() {
        // An MPS share of a seventh of the SMs and 10 GiB pinned, at 8 GiB: the 1g.10gb holds it
        // but blocks no less (1/7, 1/8 of the memory slices against 1/7 and 10/80).
        let mut mps = held(SliceKind::Mps, None, 1, 1, 8, 0.3);
        mps.memory_share = dec!(0.125);
        let r = recommend(&mps, Some(&card()), TargetProfile::Default);
        assert_eq!(r.action, Action::Keep, "{r:?}");
        // A whole H100 at 10 GiB and 3 % busy: a 1g.20gb.
        let whole = recommend(
            &held(SliceKind::Whole, None, 7, 8, 10, 0.03),
            Some(&card()),
            TargetProfile::Default,
        );
        assert_eq!(whole.action, Action::Resize);
        assert_eq!(whole.recommended_profile.as_deref(), Some("1g.20gb"));
        assert_eq!(whole.monthly_today, Some(dec!(2920.00)));
    }

    #[test]
    fn a_small_need_may_share_the_card_under_mps_where_the_target_allows_it() {
        // The 3g.40gb at 6 GiB and 3 % busy: 0.1286 compute slices needed at 0.7, 1.84 % of the
        // H100's SMs (2 % of the threads); 6.9 GiB of memory (7 GiB pinned).
        let e = held(SliceKind::Mig, Some("3g.40gb"), 3, 4, 6, 0.03);
        let r = recommend(&e, Some(&card()), TargetProfile::Default);
        assert_eq!(r.recommended_profile.as_deref(), Some("1g.10gb"));
        let alt = r.shared_alternative.expect("an MPS share");
        assert_eq!(alt.kind, SliceKind::Mps);
        assert_eq!(alt.active_thread_percentage, 2);
        assert_eq!(alt.pinned_memory_bytes, 7 * GIB);
        // 4.00 x 0.90 x (0.5 x 0.02 + 0.5 x 7 GiB / 85,520,809,984 B) x 730 = 141.76.
        let share = dec!(0.01) + dec!(0.5) * Decimal::from(7 * GIB) / dec!(85520809984);
        assert_eq!(alt.monthly, (dec!(3.6) * share * dec!(730)).round_dp(2));
        assert_eq!(alt.monthly, dec!(141.76));
        assert_eq!(alt.monthly_delta, r.monthly_today.unwrap() - dec!(141.76));
        // Production and HA keep MIG's isolation: no MPS advice.
        for target in [TargetProfile::Prod, TargetProfile::Ha] {
            assert_eq!(
                recommend(&e, Some(&card()), target).shared_alternative,
                None
            );
        }
        // A workload that needs most of the card gains nothing from sharing it.
        let big = held(SliceKind::Whole, None, 7, 8, 70, 0.9);
        assert_eq!(
            recommend(&big, Some(&card()), TargetProfile::Default).shared_alternative,
            None
        );
    }

    #[test]
    fn under_seven_days_the_advice_waits_and_says_what_the_days_so_far_advise() {
        // A whole H100 held 5 days at 1.9 % busy and 10 GiB: 11.5 GiB needed, a 1g.20gb.
        let mut e = held(SliceKind::Whole, None, 7, 8, 10, 0.019);
        let five = Decimal::from(5 * 86_400);
        (e.span_seconds, e.days, e.held_seconds, e.known_seconds) = (5 * 86_400, 5, five, five);
        e.compute_active_seconds = five * dec!(0.019);
        let r = recommend(&e, Some(&card()), TargetProfile::Default);
        assert_eq!(r.action, Action::Wait);
        assert_eq!(
            (r.recommended_profile.clone(), r.monthly_delta),
            (None, None)
        );
        assert_eq!(r.compute_busy, Some(0.019));
        let so_far = r.so_far.expect("what 5 days advise");
        assert_eq!(so_far.action, Action::Resize);
        assert_eq!(so_far.recommended_profile.as_deref(), Some("1g.20gb"));
        // 4.00 x 730 = 2920.00 today; 4.00 x (1/7 + 2/8)/2 x 730 = 573.57.
        assert_eq!(so_far.monthly_delta, Some(dec!(2346.43)));
        assert!(so_far.shared_alternative.is_some(), "{so_far:?}");
        // Held with no compute: give it back, if it stays so.
        e.compute_active_seconds = Decimal::ZERO;
        let idle = recommend(&e, Some(&card()), TargetProfile::Default);
        let so_far = idle.so_far.expect("what 5 days advise");
        assert_eq!(so_far.action, Action::GiveBack);
        assert_eq!(so_far.monthly_delta, Some(dec!(2920.00)));
        // With 7 days a recommendation has no "so far".
        e.days = 7;
        assert_eq!(
            recommend(&e, Some(&card()), TargetProfile::Default).so_far,
            None
        );
    }

    #[test]
    fn the_target_utilisation_decides_between_two_profiles() {
        // A 3g.40gb at 8 GiB, 45 % busy: 1.35 slices busy; dev (0.8) needs 1.69 (a 2g.20gb),
        // ha (0.5) 2.7 (the 3g.40gb it has).
        let e = held(SliceKind::Mig, Some("3g.40gb"), 3, 4, 8, 0.45);
        let dev = recommend(&e, Some(&card()), TargetProfile::Dev);
        assert_eq!(dev.recommended_profile.as_deref(), Some("2g.20gb"));
        let ha = recommend(&e, Some(&card()), TargetProfile::Ha);
        assert_eq!(ha.action, Action::Keep);
    }
}
