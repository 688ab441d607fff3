//! A card's ledger (DESIGN.md, "Stranded capacity and the per-card ledger"): for each step of a
//! range, what one GPU cost and where every unit of it went:
//!
//! ```text
//! cost = consumers' charges + sharing discount + placeable + stranded + rounding
//! ```
//!
//! each figure rounded once, half to even, from its exact value, and `rounding` what that left
//! over, so that the rows add up to the card's cost to the minor unit. A consumer is a (team,
//! workload, slice): the team the hours went to, the pod's owner, the slice it held. Priced as
//! invoices are (`billing::pricing`): the rate card version in force for each hour, its weights and
//! isolation factors. Unallocated capacity is the platform's here whatever the idle policy: `spread`
//! hands a month's unallocated capacity to teams by their charges across the fleet, not per card.
//!
//! Pure: the card's seconds and the rate cards come in, the ledger goes out.

pub mod service;
pub mod store;

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;

use super::usage::Step;
use crate::billing::period::BillingError;
use crate::billing::pricing::{
    PresenceAggregate, StrandedSeconds, UsageAggregate, fleet_cost, price, stranded_cost,
};
use crate::billing::rate_card::{Currency, RateCard};
use crate::domain::exact::Exact;
use crate::domain::slice::{PhysicalShare, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::text::spreadsheet_safe;
use crate::domain::time::Month;
use crate::domain::usage::{ExactSums, OccupancySums};

/// The longest range one ledger covers at `step`: a quarter of hours, a year of days.
pub fn max_range(step: Step) -> Duration {
    match step {
        Step::Hour => Duration::days(93),
        Step::Day => Duration::days(366),
        Step::Month => Duration::days(366 * 5),
    }
}

/// Where a step's figures were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// What the rollups hold now.
    Rollups,
    /// An issued month's frozen books: what was invoiced, whatever arrived since.
    Books,
}

/// One consumer's occupancy of the card in one step, under one rate card version.
#[derive(Debug, Clone)]
pub struct ConsumerSeconds {
    pub bucket: DateTime<Utc>,
    pub rate_card: Option<i64>,
    pub team: TeamId,
    /// The pod's owner (`workload_of`); none in an issued month's books, which keep the team.
    pub workload: Option<String>,
    pub slice_uuid: String,
    pub kind: SliceKind,
    pub profile: Option<String>,
    pub share: PhysicalShare,
    pub held: Exact,
    pub active: Exact,
    pub memory_byte_seconds: Exact,
}

/// The card's presence in one step under one rate card version, and what its layout stranded.
#[derive(Debug, Clone)]
pub struct CardSeconds {
    pub bucket: DateTime<Utc>,
    pub rate_card: Option<i64>,
    pub present_seconds: Decimal,
    pub stranded: StrandedSeconds,
}

/// The card a ledger is of.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Card {
    pub gpu_uuid: String,
    pub model: String,
    pub node: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Ledger {
    #[serde(flatten)]
    pub card: Card,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub step: Step,
    /// ISO 4217 code of every amount; null while nothing is priced.
    pub currency: Option<String>,
    /// The steps the card was present or held in, in order.
    pub steps: Vec<LedgerStep>,
}

/// One step of a card's ledger: `cost = sum of holders' charges + sharing_discount + placeable +
/// stranded + rounding`, to the minor unit.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct LedgerStep {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub source: Source,
    /// The card's hours present at its model's hourly cost.
    #[schema(value_type = String, example = "4.00")]
    pub cost: Decimal,
    #[serde(rename = "holders")]
    pub consumers: Vec<ConsumerCharge>,
    /// The `(1 - isolation factor)` part of the shared slices' cost.
    #[schema(value_type = String, example = "0.00")]
    pub sharing_discount: Decimal,
    /// What no slice held: `placeable + stranded`.
    #[schema(value_type = String, example = "0.29")]
    pub unallocated: Decimal,
    /// The part of it a valid instance or share could still take.
    #[schema(value_type = String, example = "0.00")]
    pub placeable: Decimal,
    /// The part the card's layout leaves to no valid profile or share.
    #[schema(value_type = String, example = "0.29")]
    pub stranded: Decimal,
    /// What rounding each figure once left over.
    #[schema(value_type = String, example = "0.00")]
    pub rounding: Decimal,
}

/// What one holder was charged in a step.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = HolderCharge)]
pub struct ConsumerCharge {
    #[schema(value_type = String)]
    pub team: TeamId,
    pub workload: Option<String>,
    pub slice_uuid: String,
    pub kind: SliceKind,
    pub profile: Option<String>,
    #[schema(value_type = String, example = "1.000000")]
    pub slice_hours: Decimal,
    #[schema(value_type = String, example = "1.86")]
    pub charge: Decimal,
}

/// Where a step starting at `bucket` ends, within `[from, to)`.
fn step_end(bucket: DateTime<Utc>, step: Step, to: DateTime<Utc>) -> DateTime<Utc> {
    let end = match step {
        Step::Hour => bucket + Duration::hours(1),
        Step::Day => bucket + Duration::days(1),
        Step::Month => Month::of(bucket).end(),
    };
    end.min(to)
}

/// A consumer: (team, workload, slice).
type ConsumerKey = (TeamId, Option<String>, String);

/// A consumer's step, exact.
struct ConsumerSums {
    kind: SliceKind,
    profile: Option<String>,
    held: Exact,
    amount: Exact,
    allocated: Exact,
}

#[derive(Default)]
struct StepSums {
    cost: Exact,
    stranded: Exact,
    consumers: BTreeMap<ConsumerKey, ConsumerSums>,
}

/// The ledger of `card` over `[from, to)`: `consumers` and `presence` carry their step's start and the
/// rate card version in force (`None`: none was), `books` says which steps were read from an issued
/// month's books, `cards` holds every version they name.
#[allow(clippy::too_many_arguments)]
pub fn ledger(
    card: Card,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Step,
    consumers: &[ConsumerSeconds],
    presence: &[CardSeconds],
    books: &dyn Fn(DateTime<Utc>) -> bool,
    cards: &BTreeMap<i64, RateCard>,
) -> Result<Ledger, BillingError> {
    let version = |bucket: DateTime<Utc>, id: Option<i64>| -> Result<&RateCard, BillingError> {
        let id = id.ok_or_else(|| BillingError::NoRateCard(bucket.to_rfc3339()))?;
        cards.get(&id).ok_or(BillingError::UnknownRateCard(id))
    };
    let mut currency: Option<Currency> = None;
    let mut one_currency = |c: &Currency| -> Result<(), BillingError> {
        match &currency {
            Some(have) if have != c => Err(BillingError::MixedCurrencies(format!(
                "{}, {}",
                have.code, c.code
            ))),
            Some(_) => Ok(()),
            None => {
                currency = Some(c.clone());
                Ok(())
            }
        }
    };
    let mut steps: BTreeMap<DateTime<Utc>, StepSums> = BTreeMap::new();
    for p in presence {
        let rc = version(p.bucket, p.rate_card)?;
        one_currency(&rc.currency)?;
        let s = steps.entry(p.bucket).or_default();
        let aggregate = PresenceAggregate {
            model: card.model.clone(),
            rate_card: rc.id,
            present_seconds: p.present_seconds,
            stranded: p.stranded.clone(),
        };
        s.cost += fleet_cost(&aggregate, rc).0;
        s.stranded += stranded_cost(&card.model, &p.stranded, rc);
    }
    for h in consumers {
        let rc = version(h.bucket, h.rate_card)?;
        one_currency(&rc.currency)?;
        let usage = UsageAggregate {
            team: h.team.clone(),
            model: card.model.clone(),
            kind: h.kind,
            profile: h.profile.clone(),
            rate_card: rc.id,
            slices: 1,
            sums: OccupancySums {
                held_seconds: h.held.to_decimal(),
                ..Default::default()
            },
            exact: ExactSums::of_share(&h.held, &h.active, &h.memory_byte_seconds, &h.share),
        };
        let charge = price(&usage, rc);
        let entry = steps
            .entry(h.bucket)
            .or_default()
            .consumers
            .entry((h.team.clone(), h.workload.clone(), h.slice_uuid.clone()))
            .or_insert_with(|| ConsumerSums {
                kind: h.kind,
                profile: h.profile.clone(),
                held: Exact::zero(),
                amount: Exact::zero(),
                allocated: Exact::zero(),
            });
        entry.held += &h.held;
        entry.amount += &charge.amount;
        entry.allocated += &charge.allocated;
    }
    let round = |x: &Exact| {
        let d = currency
            .as_ref()
            .map_or_else(|| x.to_decimal(), |c| c.round(x.clone()));
        unsigned(d)
    };
    let hour = Exact::from(3600);
    let mut out = Vec::with_capacity(steps.len());
    for (bucket, s) in steps {
        let mut charged = Vec::with_capacity(s.consumers.len());
        let mut allocated = Exact::zero();
        let mut discount = Exact::zero();
        for ((team, workload, slice_uuid), h) in s.consumers {
            discount += &h.allocated - &h.amount;
            allocated += &h.allocated;
            charged.push(ConsumerCharge {
                team,
                workload,
                slice_uuid,
                kind: h.kind,
                profile: h.profile,
                slice_hours: (h.held / &hour).round(6),
                charge: round(&h.amount),
            });
        }
        let cost = round(&s.cost);
        let sharing_discount = round(&discount);
        let unallocated = round(&(&s.cost - &allocated));
        // Stranded rounded once; placeable what is left of unallocated, so the two add up to it.
        let stranded = round(&s.stranded);
        let placeable = unsigned(unallocated - stranded);
        let rounding = unsigned(
            cost - charged.iter().map(|h| h.charge).sum::<Decimal>()
                - sharing_discount
                - unallocated,
        );
        out.push(LedgerStep {
            start: bucket.max(from),
            end: step_end(bucket, step, to),
            source: if books(bucket) {
                Source::Books
            } else {
                Source::Rollups
            },
            cost,
            consumers: charged,
            sharing_discount,
            unallocated,
            placeable,
            stranded,
            rounding,
        });
    }
    Ok(Ledger {
        card,
        from,
        to,
        step,
        currency: currency.map(|c| c.code),
        steps: out,
    })
}

/// A rounded zero is written without a sign.
fn unsigned(mut d: Decimal) -> Decimal {
    if d.is_zero() {
        d.set_sign_positive(true);
    }
    d
}

/// The ledger as CSV: per step the card's cost (`entry` = `cost`), then one row per consumer and one
/// per platform figure (`sharing_discount`, `placeable`, `stranded`, `rounding`), whose amounts add
/// up to the cost row's; text cells made safe to open in a spreadsheet.
pub fn to_csv(l: &Ledger) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "start",
        "end",
        "source",
        "gpu_uuid",
        "model",
        "node",
        "entry",
        "team",
        "workload",
        "slice_uuid",
        "kind",
        "profile",
        "slice_hours",
        "currency",
        "amount",
    ])?;
    let t = |s: &str| spreadsheet_safe(s).into_owned();
    let currency = t(l.currency.as_deref().unwrap_or_default());
    let (uuid, model, node) = (t(&l.card.gpu_uuid), t(&l.card.model), t(&l.card.node));
    for s in &l.steps {
        let source = match s.source {
            Source::Rollups => "rollups",
            Source::Books => "books",
        };
        let row =
            |entry: &str, consumer: Option<&ConsumerCharge>, amount: Decimal| -> Vec<String> {
                vec![
                    s.start.to_rfc3339(),
                    s.end.to_rfc3339(),
                    source.to_owned(),
                    uuid.clone(),
                    model.clone(),
                    node.clone(),
                    entry.to_owned(),
                    consumer.map(|h| t(h.team.as_str())).unwrap_or_default(),
                    consumer
                        .and_then(|h| h.workload.as_deref())
                        .map(t)
                        .unwrap_or_default(),
                    consumer.map(|h| t(&h.slice_uuid)).unwrap_or_default(),
                    consumer
                        .map(|h| h.kind.as_str().to_owned())
                        .unwrap_or_default(),
                    consumer
                        .and_then(|h| h.profile.as_deref())
                        .map(t)
                        .unwrap_or_default(),
                    consumer
                        .map(|h| h.slice_hours.to_string())
                        .unwrap_or_default(),
                    currency.clone(),
                    amount.to_string(),
                ]
            };
        w.write_record(row("cost", None, s.cost))?;
        for h in &s.consumers {
            w.write_record(row("holder", Some(h), h.charge))?;
        }
        for (entry, amount) in [
            ("sharing_discount", s.sharing_discount),
            ("placeable", s.placeable),
            ("stranded", s.stranded),
            ("rounding", s.rounding),
        ] {
            w.write_record(row(entry, None, amount))?;
        }
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

#[cfg(test)]
mod tests;
