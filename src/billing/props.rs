//! Conservation against an independent reference: 10,000 seeded random fleets and histories (MIG
//! layouts, MPS, time-slices, vGPU fractions, whole GPUs, models off the price list, a second rate
//! card from a random hour of the month, both idle policies, namespaces that change hands, within a
//! window too, and a late batch after the month was issued), each billed by `period::bill` and by a
//! reference written here in exact fractions
//! (`BigRational`) straight from DESIGN.md's formulas, which shares no code with the production path.
//!
//! `PROPTEST_CASES` (default 10,000) and `PROPTEST_RNG_SEED` explore further.
//!
//! The file stays whole: the generator, the reference and the comparison are one test, and the
//! reference is only worth something read line by line beside the formulas it restates.

use std::collections::BTreeMap;

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use rust_decimal::Decimal;

use super::invoice::{self, Billed, PricedKey};
use super::period::{self, Line};
use super::pricing::{PresenceAggregate, UsageAggregate};
use super::rate_card::{Currency, IdlePolicy, IsolationFactors, RateCard};
use crate::domain::ownership::{self, Claim, OwnerVersion, Ownership};
use crate::domain::slice::{GpuGeometry, Reservation, ShareWeights, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::team::UNATTRIBUTED;
use crate::domain::time::Month;
use crate::domain::usage::{ExactSums, OccupancySums};
use crate::domain::window::Window;
use crate::sim::{MIG_LAYOUTS, hash};

type Q = BigRational;

fn q(n: i64, d: i64) -> Q {
    Q::new(BigInt::from(n), BigInt::from(d))
}

fn qd(d: Decimal) -> Q {
    let m = BigInt::from(d.mantissa());
    Q::new(m, BigInt::from(10).pow(d.scale()))
}

/// Half to even at `places` decimals, in fractions.
fn round_half_even(x: &Q, places: u32) -> Q {
    let scale = BigInt::from(10).pow(places);
    let scaled = x * Q::from_integer(scale.clone());
    let floor = scaled.floor();
    let frac = &scaled - &floor;
    let half = q(1, 2);
    let up = match frac.cmp(&half) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => (floor.to_integer() % 2) != BigInt::zero(),
    };
    let n = if up { floor + Q::one() } else { floor };
    n / Q::from_integer(scale)
}

/// A small deterministic generator: the fleet is a pure function of the case's seed.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        hash(&[self.0])
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

const H100: &str = "NVIDIA H100 80GB HBM3";
const T4: &str = "Tesla T4";
const TEAMS: [&str; 4] = ["nlp", "vision", "search", UNATTRIBUTED];

/// One slice's use of its GPU while one rate card version was in force.
#[derive(Debug, Clone)]
struct Held {
    team: &'static str,
    model: &'static str,
    gpu: GpuGeometry,
    reservation: Reservation,
    card: i64,
    held_seconds: i64,
    compute_active_seconds: i64,
    memory_byte_seconds: i64,
    /// Seconds of the GPU's presence under this version the slice was not held: room for late data.
    room: i64,
    /// When the slice was held by a pod of a namespace that changed hands: its one window and the
    /// namespace's owners (`team` is then unused).
    moves: Option<Moves>,
}

/// One window `[start, start + held_seconds)` (microseconds from the month's start) of a pod
/// without a `team` label, and its namespace's owners: each from its instant until the next's, the
/// first from before the window (`UNATTRIBUTED`: no team owns it).
#[derive(Debug, Clone)]
struct Moves {
    start: i64,
    owners: Vec<(i64, &'static str)>,
}

#[derive(Debug, Clone)]
struct Fleet {
    cards: BTreeMap<i64, RateCard>,
    held: Vec<Held>,
    /// Seconds present per (model, card).
    present: Vec<(&'static str, i64, i64)>,
}

fn card(id: i64, g: &mut Gen, currency: &Currency) -> RateCard {
    let wc = g.range(0, 100);
    let factor = |g: &mut Gen, lo: i64| Decimal::new(g.range(lo, 100), 2);
    RateCard {
        id,
        effective_from: "2026-10-01T00:00:00Z".parse().expect("an instant"),
        currency: currency.clone(),
        weights: ShareWeights::new(Decimal::new(wc, 2), Decimal::ONE - Decimal::new(wc, 2))
            .expect("weights sum to one"),
        factors: IsolationFactors {
            mig: factor(g, 80),
            whole: factor(g, 80),
            mps: factor(g, 50),
            vgpu: factor(g, 50),
            timeslice: factor(g, 30),
        },
        idle_policy: if g.below(2) == 0 {
            IdlePolicy::Platform
        } else {
            IdlePolicy::Spread
        },
        prices: BTreeMap::from([(H100.to_owned(), Decimal::new(g.range(1, 2000), 2))]),
        default_hourly_cost: Decimal::new(g.range(1, 900), 2),
        note: None,
    }
}

/// A random fleet over a month of `hours`, valid as ingest would have it: every layout fits its card
/// and time-sliced replicas together use at most all of it.
fn fleet(seed: u64) -> Fleet {
    let mut g = Gen(seed);
    let currency =
        Currency::parse(["USD", "EUR", "JPY", "KWD"][g.below(4) as usize]).expect("a currency");
    let hours = g.range(1, 744);
    let two = hours > 1 && g.below(2) == 0;
    let split = if two { g.range(1, hours - 1) } else { hours };
    let mut cards = BTreeMap::from([(1, card(1, &mut g, &currency))]);
    if two {
        cards.insert(2, card(2, &mut g, &currency));
    }
    // One month in three lands lines on half minor units on purpose, through a share of 1/7 that
    // no decimal holds: compute-only weights, MIG at factor 0.5, prices of an odd number of minor
    // units, MIG slices held for multiples of 7 hours. A line of n such 1g slice-weeks costs
    // price / 2 x n: a half unit whenever n is odd.
    let midpoints = g.below(3) == 0;
    if midpoints {
        for c in cards.values_mut() {
            c.weights = ShareWeights::new(Decimal::ONE, Decimal::ZERO).expect("weights sum to one");
            c.factors.mig = Decimal::new(5, 1);
            let odd = |g: &mut Gen| Decimal::new(2 * g.range(0, 999) + 1, currency.minor_units);
            c.prices.insert(H100.to_owned(), odd(&mut g));
            c.default_hourly_cost = odd(&mut g);
        }
    }
    let mut held = Vec::new();
    let mut present: BTreeMap<(&'static str, i64), i64> = BTreeMap::new();
    for _ in 0..g.range(1, 6) {
        let (model, memory) = if g.below(4) == 0 {
            (T4, 16_106_127_360u64)
        } else {
            (H100, 85_520_809_984u64)
        };
        let gpu = GpuGeometry {
            memory_bytes: memory,
            compute_slices: 7,
            memory_slices: 8,
        };
        let present_hours = g.range(1, hours);
        // The hours of each version this GPU was present for.
        let segments: Vec<(i64, i64)> = [(1, present_hours.min(split)), (2, present_hours - split)]
            .into_iter()
            .filter(|&(_, h)| h > 0)
            .collect();
        let layout = if midpoints && g.below(4) != 0 {
            0
        } else {
            g.below(5)
        };
        let reservations: Vec<Reservation> = match layout {
            0 => MIG_LAYOUTS[g.below(MIG_LAYOUTS.len() as u64) as usize]
                .iter()
                .map(|&id| {
                    let p = crate::domain::profiles::by_id("H100-SXM5-80GB", id)
                        .expect("a layout profile");
                    Reservation::Mig {
                        profile: p.profile.clone(),
                        profile_id: Some(id),
                        compute_slices: p.compute_slices,
                        memory_slices: p.memory_slices,
                        memory_bytes: p.memory_bytes(),
                    }
                })
                .collect(),
            1 => {
                let n = g.range(2, 4);
                (0..n)
                    .map(|_| Reservation::Mps {
                        active_thread_percentage: (100 / n) as u8,
                        pinned_memory_bytes: memory / n as u64,
                    })
                    .collect()
            }
            2 => {
                let n = [2, 4, 8][g.below(3) as usize];
                vec![
                    Reservation::Vgpu {
                        fraction: Decimal::ONE / Decimal::from(n)
                    };
                    n
                ]
            }
            3 => (0..g.range(2, 4))
                .map(|r| Reservation::Timeslice {
                    replicas: 4,
                    replica: r as u16,
                })
                .collect(),
            _ => vec![Reservation::Whole],
        };
        let replicas = reservations.len() as i64;
        for &(c, seg_hours) in &segments {
            let seg = seg_hours * 3600;
            *present.entry((model, c)).or_default() += seg;
            for r in &reservations {
                let held_seconds = match g.below(4) {
                    _ if midpoints && r.kind() == SliceKind::Mig => {
                        7 * 3600 * g.range(0, seg_hours / 7)
                    }
                    0 => 0,
                    1 => seg,
                    _ => g.range(0, seg),
                };
                if held_seconds == 0 {
                    continue;
                }
                // A replica uses at most its share of the card: together they fit.
                let (compute_active_seconds, memory_byte_seconds) = match r {
                    Reservation::Timeslice { .. } => (
                        g.range(0, held_seconds / replicas),
                        (memory as i64 / replicas / 1000) * g.range(0, 1000) * held_seconds,
                    ),
                    _ => (g.range(0, held_seconds), 0),
                };
                held.push(Held {
                    team: TEAMS[g.below(4) as usize],
                    model,
                    gpu,
                    reservation: r.clone(),
                    card: c,
                    held_seconds,
                    compute_active_seconds,
                    memory_byte_seconds,
                    room: seg - held_seconds,
                    moves: None,
                });
            }
        }
    }
    Fleet {
        cards,
        held,
        present: present.into_iter().map(|((m, c), s)| (m, c, s)).collect(),
    }
}

/// What ingest and the rollups hand billing: sums per (team, model, kind, profile, card), with each
/// slice's shares as stored (exact decimals).
type Aggregates = (
    Vec<(UsageAggregate, Option<i64>)>,
    Vec<(PresenceAggregate, Option<i64>)>,
);

/// The month's first instant: where the microseconds of [`Moves`] count from.
fn month_start() -> chrono::DateTime<chrono::Utc> {
    "2026-10-01T00:00:00Z".parse().expect("an instant")
}

/// What a held slice's usage comes to per team, as ingest attributes it: the labelled team's, or
/// the window split at the instants its namespace changes owner (`domain::ownership`), each part
/// to the owner of its time. (team, held seconds, active seconds, memory byte-seconds, windows).
fn attributed(h: &Held) -> Vec<(String, Decimal, Decimal, Decimal, i64)> {
    let whole = (
        Decimal::from(h.held_seconds),
        Decimal::from(h.compute_active_seconds),
        Decimal::from(h.memory_byte_seconds),
    );
    let Some(m) = &h.moves else {
        return vec![(h.team.to_owned(), whole.0, whole.1, whole.2, 1)];
    };
    let at = |us: i64| month_start() + chrono::Duration::microseconds(us);
    let start = at(m.start);
    let window = Window {
        slice: 0,
        consumer: 0,
        start,
        end: start + chrono::Duration::seconds(h.held_seconds),
        held_seconds: whole.0,
        memory_byte_seconds: whole.2,
        memory_peak_bytes: 0,
        compute_active_seconds: Some(whole.1),
        hours: Vec::new(),
    }
    .hourly()
    .expect("a window that splits by hour");
    let owners = Ownership::from_rows(m.owners.iter().map(|&(us, team)| {
        (
            "ns".to_owned(),
            OwnerVersion {
                from: if us < 0 {
                    ownership::beginning()
                } else {
                    at(us)
                },
                team: (team != UNATTRIBUTED).then(|| TeamId::parse(team).expect("a team id")),
            },
        )
    }));
    let mut by_team: BTreeMap<String, (Decimal, Decimal, Decimal, i64)> = BTreeMap::new();
    for (_, team, part) in
        ownership::attribute(&window, Claim::Namespace("ns"), &owners).expect("parts that fit")
    {
        let t = by_team.entry(team.to_string()).or_default();
        t.0 += part.held_seconds;
        t.1 += part.compute_active_seconds;
        t.2 += part.memory_byte_seconds;
        t.3 += i64::from(part.window_count);
    }
    by_team
        .into_iter()
        .map(|(team, (held, active, memory, windows))| (team, held, active, memory, windows))
        .collect()
}

/// A line's key in the aggregates: team, model, kind, profile and the rate card in force.
type GroupKey = (String, String, SliceKind, Option<String>, i64);

fn aggregates(f: &Fleet) -> Aggregates {
    let mut groups: BTreeMap<GroupKey, (OccupancySums, ExactSums)> = BTreeMap::new();
    for h in &f.held {
        let share = h.reservation.physical_share(&h.gpu);
        let profile = match &h.reservation {
            Reservation::Mig { profile, .. } => Some(profile.clone()),
            _ => None,
        };
        for (team, held, active, memory, windows) in attributed(h) {
            let s = groups
                .entry((
                    team,
                    h.model.to_owned(),
                    h.reservation.kind(),
                    profile.clone(),
                    h.card,
                ))
                .or_default();
            s.1.add(&ExactSums::of_share(
                &held.into(),
                &active.into(),
                &memory.into(),
                &share,
            ));
            s.0.add(&OccupancySums {
                held_seconds: held,
                held_compute: held * share.compute,
                held_memory: held * share.memory,
                known_seconds: held,
                known_compute: held * share.compute,
                compute_active_seconds: active,
                active_compute: active * share.compute,
                memory_gib_seconds: Decimal::ZERO,
                memory_used: memory * share.memory / Decimal::from(share.memory_reserved_bytes),
                windows,
            });
        }
    }
    let usage = groups
        .into_iter()
        .map(|((team, model, kind, profile, card), (sums, exact))| {
            (
                UsageAggregate {
                    team: TeamId::parse(&team).expect("a team id"),
                    model,
                    kind,
                    profile,
                    rate_card: card,
                    slices: 1,
                    sums,
                    exact,
                },
                Some(card),
            )
        })
        .collect();
    let presence = f
        .present
        .iter()
        .map(|&(model, card, seconds)| {
            (
                PresenceAggregate {
                    model: model.to_owned(),
                    rate_card: card,
                    present_seconds: Decimal::from(seconds),
                    stranded: Default::default(),
                },
                Some(card),
            )
        })
        .collect();
    (usage, presence)
}

/// The reference: DESIGN.md's formulas in exact fractions.
struct Reference {
    fleet: Q,
    /// Exact amount per (team, priced key), usage and idle spread apart.
    lines: BTreeMap<(String, PricedKey, bool), Q>,
    unallocated: Q,
    discount: Q,
}

fn reference(f: &Fleet) -> Reference {
    let hourly = |card: &RateCard, model: &str| {
        qd(*card.prices.get(model).unwrap_or(&card.default_hourly_cost))
    };
    let mut fleet_by_card: BTreeMap<i64, Q> = BTreeMap::new();
    for &(model, c, seconds) in &f.present {
        *fleet_by_card.entry(c).or_insert_with(Q::zero) +=
            hourly(&f.cards[&c], model) * q(seconds, 3600);
    }
    let mut lines: BTreeMap<(String, PricedKey, bool), Q> = BTreeMap::new();
    let mut allocated: BTreeMap<i64, Q> = BTreeMap::new();
    let mut charged: BTreeMap<(i64, String), Q> = BTreeMap::new();
    let mut discount = Q::zero();
    for h in &f.held {
        let card = &f.cards[&h.card];
        let (wc, wm) = (qd(card.weights.compute), qd(card.weights.memory));
        let gpu_memory = q(h.gpu.memory_bytes as i64, 1);
        let (compute, memory, factor, kind, profile) = match &h.reservation {
            Reservation::Mig {
                compute_slices,
                memory_slices,
                profile,
                ..
            } => (
                q(i64::from(*compute_slices), 7),
                q(i64::from(*memory_slices), 8),
                card.factors.mig,
                SliceKind::Mig,
                Some(profile.clone()),
            ),
            Reservation::Mps {
                active_thread_percentage,
                pinned_memory_bytes,
            } => (
                q(i64::from(*active_thread_percentage), 100),
                q(*pinned_memory_bytes as i64, 1) / &gpu_memory,
                card.factors.mps,
                SliceKind::Mps,
                None,
            ),
            Reservation::Vgpu { fraction } => (
                qd(*fraction),
                qd(*fraction),
                card.factors.vgpu,
                SliceKind::Vgpu,
                None,
            ),
            Reservation::Whole => (
                Q::one(),
                Q::one(),
                card.factors.whole,
                SliceKind::Whole,
                None,
            ),
            Reservation::Timeslice { .. } => (
                q(h.compute_active_seconds, h.held_seconds),
                q(h.memory_byte_seconds, 1) / (&gpu_memory * q(h.held_seconds, 1)),
                card.factors.timeslice,
                SliceKind::Timeslice,
                None,
            ),
        };
        let share = &wc * compute + &wm * memory;
        // A window split between owners is windows of its parts' time, each with its figures
        // prorated: the same share (a ratio of prorated figures), its part of the held time.
        for (team, part) in owned_parts(h) {
            let blocked = hourly(card, h.model) * &share * q(h.held_seconds, 3600) * part;
            let charge = &blocked * qd(factor);
            discount += &blocked - &charge;
            *allocated.entry(h.card).or_insert_with(Q::zero) += &blocked;
            *charged
                .entry((h.card, team.to_owned()))
                .or_insert_with(Q::zero) += &charge;
            *lines
                .entry((
                    team.to_owned(),
                    (
                        Some(h.model.to_owned()),
                        Some(kind),
                        profile.clone(),
                        h.card,
                    ),
                    false,
                ))
                .or_insert_with(Q::zero) += charge;
        }
    }
    let mut unallocated = Q::zero();
    for (c, fleet) in &fleet_by_card {
        let idle = fleet - allocated.get(c).cloned().unwrap_or_else(Q::zero);
        let total: Q = charged
            .iter()
            .filter(|((card, _), _)| card == c)
            .map(|(_, v)| v.clone())
            .fold(Q::zero(), |a, b| a + b);
        if f.cards[c].idle_policy == IdlePolicy::Spread && total > Q::zero() {
            for ((card, team), v) in charged.iter().filter(|((card, _), _)| card == c) {
                let part = &idle * v / &total;
                *lines
                    .entry((team.clone(), (None, None, None, *card), true))
                    .or_insert_with(Q::zero) += part;
            }
        } else {
            unallocated += idle;
        }
    }
    Reference {
        fleet: fleet_by_card.values().fold(Q::zero(), |a, b| a + b),
        lines,
        unallocated,
        discount,
    }
}

/// Each owner's part of a held slice's time, exactly: the overlap of its span (from its instant to
/// the next's) with the window, over the window's length. All of it the labelled team's otherwise.
fn owned_parts(h: &Held) -> Vec<(&'static str, Q)> {
    let Some(m) = &h.moves else {
        return vec![(h.team, Q::one())];
    };
    let (start, end) = (m.start, m.start + h.held_seconds * 1_000_000);
    let mut parts: Vec<(&'static str, Q)> = Vec::new();
    for (i, &(from, team)) in m.owners.iter().enumerate() {
        let until = m.owners.get(i + 1).map_or(i64::MAX, |n| n.0);
        let overlap = until.min(end) - from.max(start);
        if overlap > 0 {
            match parts.iter_mut().find(|p| p.0 == team) {
                Some(p) => p.1 += q(overlap, end - start),
                None => parts.push((team, q(overlap, end - start))),
            }
        }
    }
    parts
}

fn key_of(l: &Line) -> (PricedKey, bool) {
    (
        invoice::priced_key(&l.key),
        l.key.kind == period::LineKind::IdleSpread,
    )
}

/// `prod`'s amount for a line equals the reference's exact amount rounded once, half to even: on a
/// half minor unit too.
fn check_line(prod: &Line, exact: &Q, places: u32) -> Result<(), TestCaseError> {
    let ours = round_half_even(exact, places);
    let theirs = qd(prod.amount);
    if ours != theirs {
        return Err(TestCaseError::fail(format!(
            "line {:?}: billed {} but the reference says {} (exact {})",
            prod.key,
            prod.amount,
            ours.to_f64().unwrap_or_default(),
            exact.to_f64().unwrap_or_default()
        )));
    }
    let drift = (qd(prod.exact_amount) - exact).abs();
    prop_assert!(
        drift < q(1, 1_000_000_000_000),
        "exact amount drifted: {} vs {}",
        prod.exact_amount,
        exact.to_f64().unwrap_or_default()
    );
    Ok(())
}

fn check(f: &Fleet, late: &Fleet) -> Result<(), TestCaseError> {
    let (usage, presence) = aggregates(f);
    let bill = period::bill(&usage, &presence, &f.cards, None)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let currency = bill.currency.clone().expect("a priced month");
    let places = currency.minor_units;
    let r = reference(f);
    let c = &bill.conservation;

    // Fleet cost, to the minor unit, as the reference has it.
    prop_assert_eq!(qd(c.fleet_cost), round_half_even(&r.fleet, places));
    // Every line, and no line the reference lacks.
    let mut seen = 0;
    for (team, lines) in &bill.lines {
        for l in lines {
            let (key, spread) = key_of(l);
            let exact = r
                .lines
                .get(&(team.to_string(), key.clone(), spread))
                .cloned()
                .ok_or_else(|| TestCaseError::fail(format!("line not in reference: {key:?}")))?;
            check_line(l, &exact, places)?;
            seen += 1;
        }
    }
    prop_assert_eq!(seen, r.lines.len());
    // Team charges and unattributed are the reference's lines, each rounded once, half to even (not
    // the residual's own identity, which holds by definition); unallocated never negative; the
    // residual only rounding (its bound below).
    for (paying, figure) in [(true, c.team_charges), (false, c.unattributed)] {
        let mut sum = Q::zero();
        for ((team, _, _), exact) in &r.lines {
            if (team.as_str() == UNATTRIBUTED) == paying {
                continue;
            }
            sum += round_half_even(exact, places);
        }
        prop_assert!(
            qd(figure) == sum,
            "{} is {figure}, but the reference's lines round to {}",
            if paying {
                "team charges"
            } else {
                "unattributed"
            },
            sum.to_f64().unwrap_or_default()
        );
    }
    prop_assert!(r.unallocated >= Q::zero(), "reference unallocated < 0");
    prop_assert!(!c.unallocated.is_sign_negative() || c.unallocated.is_zero());
    prop_assert_eq!(&bill.negative, &None);
    // Unallocated capacity and the sharing discount, each rounded once from its exact figure.
    prop_assert_eq!(qd(c.unallocated), round_half_even(&r.unallocated, places));
    prop_assert_eq!(qd(c.sharing_discount), round_half_even(&r.discount, places));
    let rounded = (seen + 3) as i64;
    prop_assert!(
        qd(c.rounding_residual.abs()) <= q(rounded, 2 * 10i64.pow(places)),
        "residual {} over {} rounded figures",
        c.rounding_residual,
        rounded
    );

    // A late batch after the month was issued: corrections bill the difference, once.
    let month: Month = "2026-10".parse().expect("a month");
    let mut billed: BTreeMap<TeamId, BTreeMap<PricedKey, Billed>> = BTreeMap::new();
    for (team, lines) in &bill.lines {
        for l in lines {
            let b = billed
                .entry(team.clone())
                .or_default()
                .entry(invoice::priced_key(&l.key))
                .or_default();
            b.amount += l.amount;
            b.exact_amount += l.exact_amount;
            b.slice_hours += l.slice_hours;
            b.gpu_equivalent_hours += l.gpu_equivalent_hours;
        }
    }
    let (usage, presence) = aggregates(late);
    let now = period::bill(&usage, &presence, &late.cards, None)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let r_late = reference(late);
    for team in TEAMS.iter().filter(|t| **t != UNATTRIBUTED) {
        let fixes = invoice::corrections(
            month,
            now.lines.get(*team).map(Vec::as_slice),
            billed.get(*team).unwrap_or(&BTreeMap::new()),
            &currency,
        );
        let corrected: Decimal = fixes.iter().map(|l| l.amount).sum();
        let want = |r: &Reference| {
            r.lines
                .iter()
                .filter(|((t, _, _), _)| t == team)
                .map(|(_, v)| round_half_even(v, places))
                .fold(Q::zero(), |a, b| a + b)
        };
        let delta = want(&r_late) - want(&r);
        prop_assert!(
            qd(corrected) == delta,
            "{team}: corrections {corrected}, reference {}",
            delta.to_f64().unwrap_or_default()
        );
        // Billed once: with the corrections billed, nothing is left to correct.
        let mut after = billed.get(*team).cloned().unwrap_or_default();
        for l in &fixes {
            let b = after.entry(invoice::priced_key(&l.key)).or_default();
            b.amount += l.amount;
            b.exact_amount += l.exact_amount;
            b.slice_hours += l.slice_hours;
            b.gpu_equivalent_hours += l.gpu_equivalent_hours;
        }
        let again = invoice::corrections(
            month,
            now.lines.get(*team).map(Vec::as_slice),
            &after,
            &currency,
        );
        prop_assert!(again.is_empty(), "{team} corrected twice: {again:?}");
    }
    Ok(())
}

/// `f` with some slices held by a pod of a namespace that changes hands: in one window placed in
/// the time its GPU was present, with up to three changes of owner at random microseconds inside
/// it, on an hour boundary, or at its very start or end (which split nothing).
fn with_moves(f: Fleet, seed: u64) -> Fleet {
    let mut g = Gen(seed ^ 0x0057_e4ed);
    let mut moved = f;
    for h in &mut moved.held {
        if g.below(2) == 0 {
            continue;
        }
        let start = g.range(0, h.room * 1_000_000);
        h.room -= (start + 999_999) / 1_000_000;
        let end = start + h.held_seconds * 1_000_000;
        let team = |g: &mut Gen| TEAMS[g.below(TEAMS.len() as u64) as usize];
        let mut owners = vec![(-1, team(&mut g))];
        for _ in 0..g.range(0, 3) {
            let at = match g.below(4) {
                0 | 1 => g.range(start, end),
                2 => {
                    let hour = g.range(start, end) / 3_600_000_000 * 3_600_000_000;
                    hour.max(start)
                }
                _ => [start, end][g.below(2) as usize],
            };
            owners.push((at, team(&mut g)));
        }
        owners.sort_by_key(|o| o.0);
        owners.dedup_by_key(|o| o.0);
        h.moves = Some(Moves { start, owners });
    }
    moved
}

/// `f` with late windows: more held time on some reserved slices, within the time their GPU was
/// present and they were not held (ingest refuses anything else).
fn with_late_data(f: &Fleet, seed: u64) -> Fleet {
    let mut g = Gen(seed ^ 0x1a7e);
    let mut late = f.clone();
    for h in &mut late.held {
        if g.below(3) == 0 && h.reservation.kind() != SliceKind::Timeslice {
            let more = g.range(0, h.room);
            h.held_seconds += more;
            h.room -= more;
        }
    }
    late
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10_000),
        rng_seed: std::env::var("PROPTEST_RNG_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(RngSeed::Fixed(0xb00c), RngSeed::Fixed),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_unit_of_fleet_cost_is_accounted_for_as_an_independent_reference_says(seed in any::<u64>()) {
        let f = with_moves(fleet(seed), seed);
        prop_assume!(!f.held.is_empty());
        check(&f, &with_late_data(&f, seed))?;
    }
}
