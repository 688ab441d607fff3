//! The usage report: slice-hours held, GPU-equivalent hours (held hours x physical share), memory and
//! compute used, efficiency and cost, grouped by any combination of team, GPU model, kind, profile,
//! node, namespace, workload, pod, container, pod labels and dcgm-exporter's labels (`domain::dcgm`),
//! per hour, day or month.
//!
//! Cost is priced as billing prices it (the rate card in force each hour, `billing::pricing`) and
//! rounded once per invoice line: each (month, invoice line) is apportioned over the rows it spans by
//! their exact amounts, carried to the minor unit, so that the rows add up to the line's amount to
//! the cent: the open months' invoice lines given as [`Invoiced`], else the line's exact total
//! rounded (a month covered in part, an issued month's hours as they cost now). The unit cost's
//! pod-hour costs ([`pod_hour_costs`]) are the same rows' costs, priced by the same apportioning.
//! The file stays whole: both are one pricing of invoice lines over rows, and must stay one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;

pub use group_by::{Dimension, GroupBy, MAX_DIMENSIONS, Step};

use crate::billing::pricing::{self, CarryRounder};
use crate::billing::rate_card::{Currency, RateCard};
use crate::domain::batch::DraClaim;
use crate::domain::dcgm::Device;
use crate::domain::exact::Exact;
use crate::domain::slice::{ShareWeights, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::domain::usage::{ExactSums, ExactWeights, OccupancySums};
use crate::reports::parallel;
use crate::reports::pod_hours::PodHourSums;

/// Rollup sums of one bucket, invoice line (team, model, kind, profile, rate card) and whatever
/// else the report groups by.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageSums {
    pub bucket: DateTime<Utc>,
    pub team: TeamId,
    pub model: String,
    pub kind: SliceKind,
    pub profile: Option<String>,
    /// The rate card version in force; none for hours no card covers.
    pub rate_card: Option<i64>,
    /// The GPU's node, read only when grouped by node; likewise the consumer's fields below.
    pub node: Option<String>,
    pub namespace: Option<String>,
    pub workload: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    /// The values of the label keys grouped by, in order.
    pub labels: Vec<Option<String>>,
    /// The GPU's uuid, read only when grouped by dcgm-exporter's `UUID`; likewise the MIG GPU
    /// instance id (`GPU_I_ID`) and the consumer's DRA claim (`dra_*`).
    pub gpu_uuid: Option<String>,
    pub gpu_instance_id: Option<i16>,
    pub dra_claim: Option<DraClaim>,
    /// Reserved kinds pay their share for every held second; time-sliced replicas their measured one.
    pub reserved: bool,
    pub sums: OccupancySums,
}

/// A row's values, one per dimension.
type Key = Vec<Option<String>>;

impl UsageSums {
    /// What these sums cost under `card`, exact: billing's price of one slice's usage.
    pub fn charge(&self, card: &RateCard) -> Exact {
        pricing::amount(
            &ExactSums::as_written(&self.sums),
            &self.model,
            self.kind,
            card,
        )
    }

    fn key(&self, group_by: &GroupBy) -> Key {
        let mut labels = self.labels.iter();
        group_by
            .dimensions()
            .iter()
            .map(|d| match d {
                Dimension::Team => Some(self.team.as_str().to_owned()),
                Dimension::GpuModel => Some(self.model.clone()),
                Dimension::Kind => Some(self.kind.as_str().to_owned()),
                Dimension::Profile => Some(
                    self.profile
                        .clone()
                        .unwrap_or_else(|| self.kind.as_str().to_owned()),
                ),
                Dimension::Node => self.node.clone(),
                Dimension::Namespace => self.namespace.clone(),
                Dimension::Workload => self.workload.clone(),
                Dimension::Pod => self.pod.clone(),
                Dimension::Container => self.container.clone(),
                Dimension::Label(_) => labels.next().cloned().flatten(),
                Dimension::Dcgm(l) if l.of_claim() => self
                    .dra_claim
                    .as_ref()
                    .and_then(|c| l.of_dra(c))
                    .map(str::to_owned),
                Dimension::Dcgm(l) => Device {
                    gpu_uuid: self.gpu_uuid.as_deref(),
                    node: self.node.as_deref(),
                    model: &self.model,
                    kind: self.kind,
                    profile: self.profile.as_deref(),
                    gpu_instance_id: self.gpu_instance_id,
                }
                .value(*l),
            })
            .collect()
    }
}

impl UsageSums {
    /// The pod-hour sums as the usage report's sums of (team, namespace, workload, pod) by the hour
    /// name them, the sums a price does not read zero.
    pub fn of_pod_hours(p: &PodHourSums) -> Vec<UsageSums> {
        p.rows
            .iter()
            .map(|r| {
                let class = &p.classes[r.class as usize];
                let place = &p.places[r.place as usize];
                let reserved = class.kind.is_reserved();
                let sums = if reserved {
                    OccupancySums {
                        held_compute: r.compute,
                        held_memory: r.memory,
                        ..OccupancySums::default()
                    }
                } else {
                    OccupancySums {
                        active_compute: r.compute,
                        memory_used: r.memory,
                        ..OccupancySums::default()
                    }
                };
                UsageSums {
                    bucket: r.hour,
                    team: p.teams[r.team as usize].clone(),
                    model: class.model.clone(),
                    kind: class.kind,
                    profile: class.profile.clone(),
                    rate_card: r.rate_card,
                    node: None,
                    namespace: place.namespace.clone(),
                    workload: place.workload.clone(),
                    pod: place.pod.clone(),
                    container: None,
                    labels: Vec::new(),
                    gpu_uuid: None,
                    gpu_instance_id: None,
                    dra_claim: None,
                    reserved,
                    sums,
                }
            })
            .collect()
    }
}

/// An invoice line of one month: (month, team, model, kind, profile, rate card).
pub type MonthLine = (Month, TeamId, String, SliceKind, Option<String>, i64);

/// A [`MonthLine`] borrowed from the sums it prices.
type LineOf<'s> = (Month, &'s TeamId, &'s str, SliceKind, Option<&'s str>, i64);

/// The usage lines' amounts of the open months a report covers whole, as billing prices them now:
/// what the report's costs add up to.
#[derive(Debug, Clone, Default)]
pub struct Invoiced(pub BTreeMap<MonthLine, Decimal>);

/// What a group held and used, in hours, and what it cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct UsageFigures {
    /// Hours someone held a slice, whatever its size.
    #[schema(value_type = String, example = "720")]
    pub slice_hours: Decimal,
    /// Held hours times the slice's physical share: what was blocked, in whole GPUs.
    #[schema(value_type = String, example = "334.285714")]
    pub gpu_equivalent_hours: Decimal,
    /// The part of `gpu_equivalent_hours` that was busy; null when compute activity is unknown.
    #[schema(value_type = Option<String>, example = "120.5")]
    pub used_gpu_equivalent_hours: Option<Decimal>,
    /// Memory used, integrated over time.
    #[schema(value_type = String, example = "14220.5")]
    pub memory_gib_hours: Decimal,
    /// Hours of SM activity, relative to each slice.
    #[schema(value_type = String, example = "88.25")]
    pub compute_active_hours: Decimal,
    /// Held hours whose compute activity the GPU could not measure.
    #[schema(value_type = String, example = "0")]
    pub compute_unknown_hours: Decimal,
    /// Used over held GPU-equivalent hours, 0 to 1; null when compute activity is unknown.
    #[schema(value_type = Option<String>, example = "0.3605")]
    pub efficiency: Option<Decimal>,
    /// What the group's hours cost under the rate cards in force, in the report's currency, its
    /// invoice lines' share (see the report's `currency`); null where some hour has no rate card.
    #[schema(value_type = Option<String>, example = "1337.14")]
    pub cost: Option<Decimal>,
    /// The idle part of `cost`: cost x (1 - efficiency); null when either is unknown.
    #[schema(value_type = Option<String>, example = "855.77")]
    pub idle_cost: Option<Decimal>,
    /// Occupancy windows behind these figures.
    pub windows: i64,
}

/// Exact accumulator behind [`UsageFigures`]: rounding happens once, when it is presented, except
/// for cost, whose pieces are already an invoice line's share in minor units.
#[derive(Debug, Clone, Default)]
struct Acc {
    held: Decimal,
    held_eq: Decimal,
    used_eq: Decimal,
    used_unknown: bool,
    memory_gib_seconds: Decimal,
    active: Decimal,
    unknown: Decimal,
    windows: i64,
    cost: Decimal,
    cost_unknown: bool,
}

impl Acc {
    fn add_sums(&mut self, s: &UsageSums, w: &ShareWeights) {
        let o = &s.sums;
        self.held += o.held_seconds;
        self.memory_gib_seconds += o.memory_gib_seconds;
        self.active += o.compute_active_seconds;
        self.unknown += o.held_seconds - o.known_seconds;
        self.windows += o.windows;
        self.held_eq += o.held_equivalent(s.reserved, w);
        match o.used_equivalent(s.reserved, w) {
            Some(used) => self.used_eq += used,
            None => self.used_unknown = true,
        }
    }

    fn add(&mut self, o: &Acc) {
        self.held += o.held;
        self.held_eq += o.held_eq;
        self.used_eq += o.used_eq;
        self.used_unknown |= o.used_unknown;
        self.memory_gib_seconds += o.memory_gib_seconds;
        self.active += o.active;
        self.unknown += o.unknown;
        self.windows += o.windows;
        self.cost += o.cost;
        self.cost_unknown |= o.cost_unknown;
    }

    fn figures(&self, currency: Option<&Currency>) -> UsageFigures {
        let hours = |s: Decimal| (s / Decimal::from(3600)).round_dp(6).normalize();
        let used = (!self.used_unknown).then_some(self.used_eq);
        let efficiency = used.and_then(|u| {
            (self.held_eq > Decimal::ZERO).then(|| (u / self.held_eq).round_dp(4).normalize())
        });
        let cost = currency.filter(|_| !self.cost_unknown).map(|_| self.cost);
        UsageFigures {
            slice_hours: hours(self.held),
            gpu_equivalent_hours: hours(self.held_eq),
            used_gpu_equivalent_hours: used.map(hours),
            memory_gib_hours: hours(self.memory_gib_seconds),
            compute_active_hours: hours(self.active),
            compute_unknown_hours: hours(self.unknown),
            efficiency,
            cost,
            idle_cost: match (cost, currency, used) {
                (Some(c), Some(cur), Some(u)) if self.held_eq > Decimal::ZERO => {
                    Some(cur.round(c * (Decimal::ONE - u / self.held_eq)))
                }
                (Some(_), Some(_), Some(_)) => Some(Decimal::ZERO),
                _ => None,
            },
            windows: self.windows,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UsageRow {
    /// Start of the hour, day or month (UTC).
    pub bucket: DateTime<Utc>,
    /// The row's value for each dimension of `group_by`; null where the usage has none (a pod
    /// without the label, a consumer outside Kubernetes).
    pub key: BTreeMap<String, Option<String>>,
    #[serde(flatten)]
    pub figures: UsageFigures,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UsageTotal {
    pub key: BTreeMap<String, Option<String>>,
    #[serde(flatten)]
    pub figures: UsageFigures,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UsageReport {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// The dimensions, as asked for: `team`, `gpu_model`, `kind`, `profile`, `node`, `namespace`,
    /// `workload`, `pod`, `container`, `label:<key>`.
    #[schema(example = json!(["team", "namespace"]))]
    pub group_by: Vec<String>,
    pub step: Step,
    /// The weights of DESIGN.md's share formula used for GPU-equivalent hours.
    pub weights: ShareWeights,
    /// The currency of every cost; null when the hours' rate cards use several.
    #[schema(example = "USD")]
    pub currency: Option<String>,
    /// Why some costs are null, if they are.
    pub cost_note: Option<String>,
    /// One row per bucket and key, ordered by bucket then key.
    pub rows: Vec<UsageRow>,
    /// One row per key over the whole range.
    pub totals: Vec<UsageTotal>,
    /// Everything in the range.
    pub total: UsageFigures,
}

/// A range's figures before they are presented: rows by (bucket, key), each row's cost the sum of
/// its invoice lines' shares.
struct Priced {
    rows: BTreeMap<(DateTime<Utc>, Key), Acc>,
    currency: Option<Currency>,
    cost_note: Option<String>,
}

/// Prices the rollup sums and apportions each (month, invoice line) over the rows it spans, the
/// other figures summed too.
fn priced(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: &GroupBy,
    weights: &ShareWeights,
    sums: &[UsageSums],
    cards: &BTreeMap<i64, RateCard>,
    invoiced: &Invoiced,
) -> Priced {
    // Each row's place in `accs`, by (bucket, key); a row's key is kept once, here.
    let mut index: BTreeMap<(DateTime<Utc>, Key), usize> = BTreeMap::new();
    let mut accs: Vec<Acc> = Vec::new();
    // Each month's invoice line, and its GPU-equivalent seconds per row (by place), as the sums
    // come: a line is one model, kind and rate card, so its rows are priced together, below.
    let mut lines: BTreeMap<LineOf<'_>, Vec<(usize, Exact)>> = BTreeMap::new();
    let mut card_weights: BTreeMap<i64, ExactWeights> = BTreeMap::new();
    let mut currencies = BTreeSet::new();
    let mut unpriced = None;
    for s in sums {
        let next = accs.len();
        let row = *index.entry((s.bucket, s.key(group_by))).or_insert(next);
        if row == next {
            accs.push(Acc::default());
        }
        let acc = &mut accs[row];
        acc.add_sums(s, weights);
        let Some(card) = s.rate_card.and_then(|id| cards.get(&id)) else {
            acc.cost_unknown = true;
            unpriced.get_or_insert(s.bucket);
            continue;
        };
        currencies.insert(card.currency.code.clone());
        let line = (
            Month::of(s.bucket),
            &s.team,
            s.model.as_str(),
            s.kind,
            s.profile.as_deref(),
            card.id,
        );
        let weights = card_weights
            .entry(card.id)
            .or_insert_with(|| ExactWeights::from(&card.weights));
        let seconds = ExactSums::held_equivalent_as_written(&s.sums, s.kind.is_reserved(), weights);
        lines.entry(line).or_default().push((row, seconds));
    }
    // Each row's rank in (bucket, key) order: a line's pieces are rounded in that order.
    let mut rank = vec![0; accs.len()];
    for (r, &row) in index.values().enumerate() {
        rank[row] = r;
    }
    for (line, mut all) in lines {
        all.sort_by_key(|&(row, _)| rank[row]);
        let card = &cards[&line.5];
        apportion(line, card, all, invoiced, from, to, |row, amount| {
            accs[row].cost += amount;
        });
    }
    let rows = index
        .into_iter()
        .map(|(key, row)| (key, std::mem::take(&mut accs[row])))
        .collect();
    let (currency, cost_note) = currency_and_note(currencies, unpriced);
    Priced {
        rows,
        currency,
        cost_note,
    }
}

/// Apportions one month's invoice line over the rows it spans: `pieces`, each row's GPU-equivalent
/// seconds of the line in the rows' order (a row's pieces, sums that differ only in what the
/// grouping leaves out, next to each other), gives `add` each row's amount, carried to the minor
/// unit, so that they add up to the line's amount: the open month's invoice line when `invoiced`
/// has it and `[from, to)` covers the month whole, else the line's exact amount rounded.
fn apportion(
    line: LineOf<'_>,
    card: &RateCard,
    pieces: Vec<(usize, Exact)>,
    invoiced: &Invoiced,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    mut add: impl FnMut(usize, Decimal),
) {
    // A row's pieces of the line, one.
    let mut merged: Vec<(usize, Exact)> = Vec::with_capacity(pieces.len());
    for (row, piece) in pieces {
        match merged.last_mut() {
            Some((last, sum)) if *last == row => *sum += piece,
            _ => merged.push((row, piece)),
        }
    }
    let pieces = merged;
    let currency = &card.currency;
    let seconds: Exact = pieces.iter().map(|(_, piece)| piece).sum();
    // The line's exact amount: billing's price of each row (`pricing::amount`), added up.
    let exact = &seconds * pricing::second_price(line.2, line.3, card);
    let month = line.0;
    let owned: MonthLine = (
        month,
        line.1.clone(),
        line.2.to_owned(),
        line.3,
        line.4.map(str::to_owned),
        line.5,
    );
    let target = invoiced
        .0
        .get(&owned)
        .copied()
        .filter(|_| month.start() >= from && month.end() <= to)
        .unwrap_or_else(|| currency.round(exact.clone()));
    // Each row's exact amount scaled so that the pieces add up to the target, whatever it is:
    // amount x target / exact, which is its seconds x target / the line's seconds.
    let per_second = (!exact.is_zero()).then(|| Exact::from(target) / &seconds);
    let mut rounder = CarryRounder::new();
    let n = pieces.len();
    for (i, (row, piece)) in pieces.iter().enumerate() {
        let scaled = per_second.as_ref().map_or_else(Exact::zero, |r| piece * r);
        let amount = if i + 1 == n {
            rounder.last(scaled, target)
        } else {
            rounder.next(scaled, currency)
        };
        add(*row, amount);
    }
}

/// The report's currency and why some costs are null: none when the rate cards priced in several
/// `currencies`; `unpriced`, the first bucket with an hour no rate card covers.
fn currency_and_note(
    currencies: BTreeSet<String>,
    unpriced: Option<DateTime<Utc>>,
) -> (Option<Currency>, Option<String>) {
    match (currencies.len(), unpriced) {
        (n, _) if n > 1 => (
            None,
            Some(format!(
                "the hours' rate cards use several currencies ({}): costs are not added up across them",
                currencies.into_iter().collect::<Vec<_>>().join(", ")
            )),
        ),
        (_, Some(at)) => (
            currencies.first().and_then(|c| Currency::parse(c).ok()),
            Some(format!(
                "no rate card is in force for some hours (the first in the bucket of {}): rows with such hours have no cost",
                at.to_rfc3339()
            )),
        ),
        _ => (
            currencies.first().and_then(|c| Currency::parse(c).ok()),
            None,
        ),
    }
}

/// Builds the report from the rollup sums: rows and totals per key, priced by `cards`, adding up
/// to `invoiced` for the months the range covers whole.
#[allow(clippy::too_many_arguments)]
pub fn build(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: &GroupBy,
    step: Step,
    weights: ShareWeights,
    sums: &[UsageSums],
    cards: &BTreeMap<i64, RateCard>,
    invoiced: &Invoiced,
) -> UsageReport {
    let Priced {
        rows,
        currency,
        cost_note,
    } = priced(from, to, group_by, &weights, sums, cards, invoiced);
    let names: Vec<String> = group_by.dimensions().iter().map(Dimension::name).collect();
    let named = |key: &Key| -> BTreeMap<String, Option<String>> {
        names.iter().cloned().zip(key.iter().cloned()).collect()
    };
    let mut totals: BTreeMap<&Key, Acc> = BTreeMap::new();
    let mut total = Acc::default();
    for ((_, key), acc) in &rows {
        totals.entry(key).or_default().add(acc);
        total.add(acc);
    }
    let c = currency.as_ref();
    UsageReport {
        from,
        to,
        group_by: names.clone(),
        step,
        weights,
        currency: currency.as_ref().map(|c| c.code.clone()),
        cost_note,
        rows: rows
            .iter()
            .map(|((bucket, key), acc)| UsageRow {
                bucket: *bucket,
                key: named(key),
                figures: acc.figures(c),
            })
            .collect(),
        totals: totals
            .iter()
            .map(|(key, acc)| UsageTotal {
                key: named(key),
                figures: acc.figures(c),
            })
            .collect(),
        total: total.figures(c),
    }
}

/// A row of the report: its bucket and its values in `group_by`'s order.
pub type RowKey = (DateTime<Utc>, Vec<Option<String>>);

/// One pod-hour's cost as [`build`] gives the row of that hour and (team, namespace, workload,
/// pod); `None`: some hour of the row has no rate card, or the rate cards use several currencies.
#[derive(Debug, Clone, PartialEq)]
pub struct PodHourCost {
    pub hour: DateTime<Utc>,
    /// Indices into the sums' tables.
    pub team: u32,
    pub place: u32,
    pub cost: Option<Decimal>,
}

/// Each pod-hour's cost alone, with the report's currency and cost note: for readers that need no
/// other figure (the unit cost).
#[derive(Debug, Clone)]
pub struct PodHourCosts {
    /// The sums priced: their tables name the rows' teams and places.
    pub sums: Arc<PodHourSums>,
    /// In the report's order (hour, team, namespace, workload, pod).
    pub rows: Vec<PodHourCost>,
    pub currency: Option<Currency>,
    pub cost_note: Option<String>,
}

impl PodHourCosts {
    /// The costs by (hour, [team, namespace, workload, pod]): as the report's rows name them.
    pub fn by_name(&self) -> BTreeMap<RowKey, Option<Decimal>> {
        self.rows
            .iter()
            .map(|r| {
                let place = &self.sums.places[r.place as usize];
                let key = vec![
                    Some(self.sums.teams[r.team as usize].as_str().to_owned()),
                    place.namespace.clone(),
                    place.workload.clone(),
                    place.pod.clone(),
                ];
                ((r.hour, key), r.cost)
            })
            .collect()
    }
}

/// An invoice line of a month by the pod-hour sums' indices: (month, team, class, rate card).
type LineAt = (Month, u32, u32, i64);

/// [`build`]'s costs of the pod-hour sums (hour by hour, by team, namespace, workload and pod),
/// none of its other figures: the same invoice lines apportioned over the same rows in the same
/// order, the rows and lines found by the sums' indices rather than by their names, the lines
/// priced on every core (`parallel`), each line on one.
pub fn pod_hour_costs(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    sums: Arc<PodHourSums>,
    cards: &BTreeMap<i64, RateCard>,
    invoiced: &Invoiced,
) -> PodHourCosts {
    let mut rows: Vec<PodHourCost> = Vec::with_capacity(sums.rows.len());
    // Each (month, team, class, rate card) line's rows and sums, in the rows' order.
    let mut lines: HashMap<LineAt, Vec<(usize, usize)>> = HashMap::new();
    let mut unpriced = None;
    let mut month = None;
    for (i, s) in sums.rows.iter().enumerate() {
        let same_row = rows
            .last()
            .is_some_and(|r| (r.hour, r.team, r.place) == (s.hour, s.team, s.place));
        if !same_row {
            rows.push(PodHourCost {
                hour: s.hour,
                team: s.team,
                place: s.place,
                cost: Some(Decimal::ZERO),
            });
        }
        let row = rows.len() - 1;
        let Some(card) = s.rate_card.filter(|id| cards.contains_key(id)) else {
            rows[row].cost = None;
            unpriced.get_or_insert(s.hour);
            continue;
        };
        let m = match month {
            Some((hour, m)) if hour == s.hour => m,
            _ => {
                let m = Month::of(s.hour);
                month = Some((s.hour, m));
                m
            }
        };
        lines
            .entry((m, s.team, s.class, card))
            .or_default()
            .push((row, i));
    }
    let currencies: BTreeSet<String> = lines
        .keys()
        .map(|&(.., card)| cards[&card].currency.code.clone())
        .collect();
    let parts = parallel::balanced(
        lines.into_iter().collect(),
        parallel::parts_of(sums.rows.len()),
        |(_, pieces)| pieces.len(),
    );
    // Each line's pieces (its sums' GPU-equivalent seconds), apportioned: each row's amounts.
    let amounts = parallel::each(parts, |part| {
        let mut amounts: Vec<(usize, Decimal)> = Vec::new();
        for ((m, team, class, card), pieces) in part {
            let c = &sums.classes[class as usize];
            let line = (
                m,
                &sums.teams[team as usize],
                c.model.as_str(),
                c.kind,
                c.profile.as_deref(),
                card,
            );
            let card = &cards[&card];
            let weights = ExactWeights::from(&card.weights);
            let pieces = pieces
                .into_iter()
                .map(|(row, i)| {
                    let s = &sums.rows[i];
                    (
                        row,
                        ExactSums::held_equivalent_of(s.compute, s.memory, &weights),
                    )
                })
                .collect();
            apportion(line, card, pieces, invoiced, from, to, |row, amount| {
                amounts.push((row, amount));
            });
        }
        amounts
    });
    for (row, amount) in amounts.into_iter().flatten() {
        if let Some(cost) = &mut rows[row].cost {
            *cost += amount;
        }
    }
    let (currency, cost_note) = currency_and_note(currencies, unpriced);
    if currency.is_none() {
        for r in &mut rows {
            r.cost = None;
        }
    }
    PodHourCosts {
        sums,
        rows,
        currency,
        cost_note,
    }
}

mod group_by;
#[cfg(test)]
mod tests;
