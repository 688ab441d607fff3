//! FOCUS 1.3's split cost allocation (DESIGN.md, "Stranded capacity and the per-card ledger"): the
//! origin charge is one card's day under one rate card version, its hours present at its model's
//! hourly cost; the allocated charges are the slice-days held on it (each one's physical share of
//! it, as a compute and a memory element) and its unallocated portion (an element of the platform's
//! unallocated row of the model's day). Each ratio is the exact fraction cut (rounded down) to
//! [`RATIO_PLACES`]; the card's unallocated element takes what the cuts left, so a card-day's
//! ratios sum to exactly 1.
//!
//! Read from what the month's rows are read from: an issued month's books (`book_gpu`), else the
//! rollups, so an issued month's export keeps its bytes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde_json::{Map, Value};
use sqlx::PgConnection;

use super::{Allocated, PHYSICAL_SHARE, PRICING_UNIT, json_number};
use crate::billing::rate_card::RateCard;
use crate::domain::exact::Exact;
use crate::domain::time::Month;
use crate::domain::usage::ExactSums;
use crate::reports::slices::SliceDay;

/// The places an `AllocatedRatio` is written to.
pub const RATIO_PLACES: u32 = 9;

/// A card-day: model, rate card version, day, GPU uuid (so a model-day's cards are neighbours).
type Key = (String, i64, DateTime<Utc>, String);

#[derive(Debug, Clone)]
struct CardDay {
    present_seconds: Decimal,
    /// The written ratios of the slices' elements so far.
    written: Decimal,
    /// Their GPU-equivalent seconds, exact.
    held: Exact,
}

/// The card-days of a month, and what the slice rows written so far took of each.
#[derive(Debug, Default)]
pub struct Split {
    days: BTreeMap<Key, CardDay>,
}

/// `x` cut to [`RATIO_PLACES`]: never above it, so the cuts of a card-day never pass 1.
fn cut(x: &Exact) -> Decimal {
    let r = x.round(RATIO_PLACES);
    if Exact::from(r) > *x {
        r - Decimal::new(1, RATIO_PLACES)
    } else {
        r
    }
}

fn hours(seconds: &Exact) -> Value {
    json_number((seconds / &Exact::from(3600)).round(6))
}

impl Split {
    /// Each card's presence per rate card version and day of `month`, from its books when
    /// `from_book` (none for books written before they kept cards' days: nothing is split then).
    pub async fn read(
        conn: &mut PgConnection,
        month: Month,
        from_book: bool,
    ) -> Result<Split, sqlx::Error> {
        let rows = super::store::card_days(conn, month, from_book).await?;
        let mut days = BTreeMap::new();
        for r in rows {
            let key = (r.model, r.rate_card, r.day, r.gpu_uuid);
            let present = r.present_seconds;
            days.entry(key)
                .or_insert_with(|| CardDay {
                    present_seconds: Decimal::ZERO,
                    written: Decimal::ZERO,
                    held: Exact::zero(),
                })
                .present_seconds += present;
        }
        Ok(Split { days })
    }

    /// A slice-day's part of its card's day under `card`: `None` where the card's day is unknown
    /// (no presence recorded for it), and then no part of a split.
    pub fn slice(
        &mut self,
        d: &SliceDay,
        card: &RateCard,
        mut allocation: Allocated,
    ) -> Option<Allocated> {
        let gpu = d.gpu_uuid.clone()?;
        let key = (d.model.clone(), card.id, d.day, gpu);
        let day = self.days.get_mut(&key)?;
        if day.present_seconds <= Decimal::ZERO {
            return None;
        }
        let present = Exact::from(day.present_seconds);
        let held = Exact::from(d.held_seconds);
        let sums = ExactSums::of_share(
            &held,
            &Exact::from(d.compute_active_seconds),
            &Exact::from(d.memory_byte_seconds),
            &d.share(),
        );
        // What a reserved slice blocks is its share of the card for every second held; a
        // time-sliced replica blocks what it measurably used.
        let (compute, memory) = if d.kind.is_reserved() {
            (sums.held_compute, sums.held_memory)
        } else {
            (sums.active_compute, sums.memory_used)
        };
        let w = &card.weights;
        let mut elements = Vec::with_capacity(2);
        for (component, seconds, weight) in [
            ("Compute", compute, w.compute),
            ("Memory", memory, w.memory),
        ] {
            let weighted = &seconds * weight;
            let ratio = cut(&(&weighted / &present));
            day.written += ratio;
            day.held += &weighted;
            let mut e = Map::new();
            e.insert("AllocatedRatio".into(), json_number(ratio));
            e.insert("UsageUnit".into(), PRICING_UNIT.into());
            e.insert("UsageQuantity".into(), hours(&weighted));
            e.insert("x_Component".into(), component.into());
            if !held.is_zero() {
                e.insert("x_Share".into(), json_number((&seconds / &held).round(6)));
            }
            e.insert("x_Weight".into(), json_number(weight));
            elements.push(Value::Object(e));
        }
        let mut details = Map::new();
        details.insert("Elements".into(), Value::Array(elements));
        details.insert("x_OriginResourceId".into(), key.3.into());
        details.insert("x_OriginQuantity".into(), hours(&present));
        details.insert(
            "x_OriginListCost".into(),
            json_number((&present * card.hourly_cost(&d.model).0 / &Exact::from(3600)).round(6)),
        );
        details.insert("x_SliceKind".into(), d.kind.as_str().into());
        details.insert(
            "x_IsolationFactor".into(),
            json_number(card.factors.of(d.kind)),
        );
        details.insert("x_IdlePolicy".into(), card.idle_policy.as_str().into());
        allocation.details = Some(details);
        Some(allocation)
    }

    /// The unallocated portion of each card of `model`'s day under `rate_card`, one element per
    /// card with anything left: `1 - ` what its slices' elements took, so that the card-day's
    /// ratios sum to exactly 1. `None` where every card was wholly held.
    pub fn unallocated(
        &self,
        model: &str,
        rate_card: i64,
        day: DateTime<Utc>,
        spread: bool,
    ) -> Option<Allocated> {
        let from = (model.to_owned(), rate_card, day, String::new());
        let elements: Vec<Value> = self
            .days
            .range(from..)
            .take_while(|(k, _)| k.0 == model && k.1 == rate_card && k.2 == day)
            .filter(|(_, d)| d.present_seconds > Decimal::ZERO)
            .filter_map(|(k, d)| {
                let ratio = Decimal::ONE - d.written;
                if ratio.is_zero() {
                    return None;
                }
                let mut e = Map::new();
                e.insert("AllocatedRatio".into(), json_number(ratio));
                e.insert("UsageUnit".into(), PRICING_UNIT.into());
                e.insert(
                    "UsageQuantity".into(),
                    hours(&(Exact::from(d.present_seconds) - &d.held)),
                );
                e.insert("x_Component".into(), "Unallocated".into());
                e.insert("x_OriginResourceId".into(), k.3.clone().into());
                Some(Value::Object(e))
            })
            .collect();
        if elements.is_empty() {
            return None;
        }
        let mut details = Map::new();
        details.insert("Elements".into(), Value::Array(elements));
        details.insert(
            "x_IdlePolicy".into(),
            if spread { "spread" } else { "platform" }.into(),
        );
        Some(Allocated {
            method: PHYSICAL_SHARE,
            resource: None,
            details: Some(details),
            tags: BTreeMap::new(),
        })
    }
}

/// The idle-capacity shares spread to teams under each rate card version: a split of its own,
/// whose origin is the version's unallocated capacity of the month. Each team's ratio is its
/// amount over the version's, cut to [`RATIO_PLACES`], the last team's taking what the cuts left.
pub fn idle_spread_ratios<'a>(
    lines: impl Iterator<Item = (&'a str, i64, Decimal)>,
) -> BTreeMap<(String, i64), Decimal> {
    let mut by_card: BTreeMap<i64, Vec<(&str, Decimal)>> = BTreeMap::new();
    for (team, card, amount) in lines {
        by_card.entry(card).or_default().push((team, amount));
    }
    let mut out = BTreeMap::new();
    for (card, teams) in by_card {
        let total: Decimal = teams.iter().map(|t| t.1).sum();
        if total.is_zero() {
            continue;
        }
        let mut written = Decimal::ZERO;
        let n = teams.len();
        for (i, (team, amount)) in teams.into_iter().enumerate() {
            let ratio = if i + 1 == n {
                Decimal::ONE - written
            } else {
                cut(&(Exact::from(amount) / &Exact::from(total)))
            };
            written += ratio;
            out.insert((team.to_owned(), card), ratio);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    #[test]
    fn ratios_are_cut_never_rounded_up() {
        assert_eq!(cut(&Exact::ratio(13, 28)), dec!(0.464285714));
        assert_eq!(cut(&Exact::ratio(2, 3)), dec!(0.666666666));
        assert_eq!(cut(&Exact::ratio(1, 4)), dec!(0.25));
        assert_eq!(cut(&Exact::from(1)), dec!(1));
    }

    #[test]
    fn idle_spread_ratios_sum_to_one_per_rate_card() {
        let r = idle_spread_ratios(
            [
                ("a", 1, dec!(1.00)),
                ("b", 1, dec!(1.00)),
                ("c", 1, dec!(1.00)),
                ("a", 2, dec!(3.00)),
            ]
            .into_iter(),
        );
        assert_eq!(r[&("a".into(), 1)], dec!(0.333333333));
        assert_eq!(r[&("b".into(), 1)], dec!(0.333333333));
        assert_eq!(r[&("c".into(), 1)], dec!(0.333333334));
        assert_eq!(r[&("a".into(), 2)], dec!(1));
    }
}
