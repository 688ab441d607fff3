//! A billing period (a calendar month, UTC) priced whole: each team's invoice lines, rounded once,
//! and the conservation block that accounts for every unit of the fleet's cost:
//!
//! ```text
//! fleet cost = team charges + unallocated + sharing discount + rounding residual
//! ```
//!
//! `unattributed` is not a team that pays: its lines are priced like any team's, so that it shows, but
//! it is never invoiced, and its cost stays with the platform (`unattributed` in the conservation
//! block) until its consumers are attributed.
//!
//! A period's life (DESIGN.md, Domain): open until the month ends (nothing can be drafted), then
//! closed (drafts made and re-made), and issued once its first invoice is: from then on its books are
//! frozen. Invoices may be issued only after a grace period for late data.
//!
//! Pure: the rollup aggregates and rate cards come in, lines and figures go out.
//!
//! The file stays whole, with its tests: every line [`bill`] makes feeds the conservation identity,
//! and the table and property tests that hold it to the cent belong beside the one function.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;

use super::pricing::{Charge, PresenceAggregate, UsageAggregate, fleet_cost, price, stranded_cost};
use super::rate_card::{Currency, IdlePolicy, PriceSource, RateCard};
use crate::domain::exact::Exact;
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::domain::time::Month;

/// Where a billing period stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PeriodState {
    /// The month has not ended: nothing can be drafted.
    Open,
    /// Ended: drafts may be made and re-made.
    Closed,
    /// Its first invoice is issued: its books are frozen, and late data waits as corrections.
    Issued,
}

impl PeriodState {
    /// `month`'s state at `now`: issued as its books say, else open until it ends, then closed.
    pub fn of(month: Month, now: DateTime<Utc>, books: Books) -> PeriodState {
        if books.issued() {
            PeriodState::Issued
        } else if now < month.end() {
            PeriodState::Open
        } else {
            PeriodState::Closed
        }
    }
}

/// A month can be drafted once it has ended.
pub fn may_draft(month: Month, now: DateTime<Utc>) -> Result<(), BillingError> {
    if now < month.end() {
        return Err(BillingError::NotEnded {
            month,
            from: month.end(),
        });
    }
    Ok(())
}

/// A month's invoices can be issued once its grace period for late data has passed.
pub fn may_issue(month: Month, now: DateTime<Utc>, grace: Duration) -> Result<(), BillingError> {
    may_draft(month, now)?;
    let from = month.end() + grace;
    if now < from {
        return Err(BillingError::InGrace {
            month,
            grace: match grace.num_days() {
                d if d > 0 && grace == Duration::days(d) => {
                    format!("{d} day{}", if d == 1 { "" } else { "s" })
                }
                _ => humantime::format_duration(grace.to_std().unwrap_or_default()).to_string(),
            },
            from,
        });
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BillingError {
    #[error("{month} has not ended: it can be drafted from {}", .from.to_rfc3339())]
    NotEnded { month: Month, from: DateTime<Utc> },
    #[error(
        "{month} is in its grace period for late data ({grace}): its invoices can be issued from {}",
        .from.to_rfc3339()
    )]
    InGrace {
        month: Month,
        grace: String,
        from: DateTime<Utc>,
    },
    #[error(
        "the figures of the period do not add up: {0}; nothing is published (this is a bug or data that bypassed ingest's checks: the server log has the details)"
    )]
    Negative(String),
    #[error(
        "no rate card is in force for some hours of the period; load one effective from {0} or earlier (`slicemeter rate-card load`)"
    )]
    NoRateCard(String),
    #[error(
        "the period's rate cards use several currencies ({0}); one period is billed in one currency"
    )]
    MixedCurrencies(String),
    #[error("rate card version {0} prices some hours but is not published")]
    UnknownRateCard(i64),
}

/// Where a period's books stand: what [`PeriodState`] is derived from, with what the state does
/// not say (whether a run wrote them, when they were frozen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Books {
    /// No invoice run yet (or none since the last credit note unfroze them).
    None,
    /// Written by a run; drafts may be made again.
    Drafted,
    /// The period is issued (its first invoice at `at`): its books are frozen, and read from here
    /// whatever arrives later.
    Issued { at: DateTime<Utc> },
}

impl Books {
    /// Whether the period is issued: its figures are then read from the books, not the rollups.
    pub fn issued(self) -> bool {
        matches!(self, Books::Issued { .. })
    }
}

/// What an invoice line is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// Slices the team held.
    Usage,
    /// The team's part of unallocated capacity, under the `spread` idle policy.
    IdleSpread,
    /// A difference found after the period's invoice was issued (late data, re-attribution).
    Correction,
    /// A credit note's reversal of an issued line.
    Credit,
}

impl LineKind {
    pub const ALL: [LineKind; 4] = [
        LineKind::Usage,
        LineKind::IdleSpread,
        LineKind::Correction,
        LineKind::Credit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LineKind::Usage => "usage",
            LineKind::IdleSpread => "idle_spread",
            LineKind::Correction => "correction",
            LineKind::Credit => "credit",
        }
    }
}

impl std::str::FromStr for LineKind {
    type Err = crate::domain::text::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::domain::text::UnknownName::find("line kind", s, &Self::ALL, |k| k.as_str())
    }
}

/// What makes two lines the same line: corrections compare periods by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LineKey {
    pub kind: LineKind,
    pub gpu_model: Option<String>,
    pub slice_kind: Option<SliceKind>,
    pub profile: Option<String>,
    pub rate_card: i64,
}

/// An invoice line before it is stored: exact amount beside the amount rounded once.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub key: LineKey,
    pub price_source: Option<PriceSource>,
    pub slice_hours: Decimal,
    pub gpu_equivalent_hours: Decimal,
    pub unit_price: Option<Decimal>,
    pub exact_amount: Decimal,
    pub amount: Decimal,
    pub windows: i64,
    /// The earlier period a correction line corrects.
    pub corrects: Option<Month>,
    /// For a correction: what had been billed for its key when it was made (issuing checks that
    /// nothing was billed for it since: a correction is billed once).
    pub billed_before: Option<Decimal>,
}

impl Line {
    pub fn description(&self) -> String {
        let k = &self.key;
        let what = self.what();
        match (k.kind, self.corrects) {
            (LineKind::Correction, Some(period)) => format!("Correction for {period}: {what}"),
            (LineKind::Credit, _) => format!("Credit: {what}"),
            _ => what,
        }
    }

    /// What the line prices, whatever its kind.
    fn what(&self) -> String {
        let k = &self.key;
        match k.gpu_model {
            None => format!(
                "Share of unallocated GPU capacity (idle policy spread, rate card v{})",
                k.rate_card
            ),
            Some(_) => {
                let what = match (&k.slice_kind, &k.profile) {
                    (Some(SliceKind::Mig), Some(p)) => format!("MIG {p}"),
                    (Some(SliceKind::Whole), _) => "Whole GPU".to_owned(),
                    (Some(SliceKind::Mps), _) => "MPS share".to_owned(),
                    (Some(SliceKind::Vgpu), _) => "vGPU fraction".to_owned(),
                    (Some(SliceKind::Timeslice), _) => "Time-sliced replica (measured)".to_owned(),
                    _ => "GPU".to_owned(),
                };
                let model = k.gpu_model.as_deref().unwrap_or("unknown model");
                let default = if self.price_source == Some(PriceSource::Default) {
                    ", model not on the price list: default rate"
                } else {
                    ""
                };
                format!("{what} on {model} (rate card v{}{default})", k.rate_card)
            }
        }
    }
}

/// Every unit of the period's fleet cost, accounted for. Rounded figures; the residual is what
/// rounding each line once left over (at most half a minor unit per rounded figure).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Conservation {
    /// Every GPU-hour present in the period at its model's hourly cost.
    #[schema(value_type = String, example = "2880.00")]
    pub fleet_cost: Decimal,
    /// The sum of every team's invoice lines.
    #[schema(value_type = String, example = "2108.56")]
    pub team_charges: Decimal,
    /// What consumers no team claims held: priced like a team's lines, carried by the platform
    /// until they are attributed, never invoiced.
    #[schema(value_type = String, example = "0.00")]
    pub unattributed: Decimal,
    /// The share of GPUs no slice held (after spreading, under the `spread` policy):
    /// `placeable + stranded`, to the cent.
    #[schema(value_type = String, example = "771.43")]
    pub unallocated: Decimal,
    /// The part of `unallocated` that a valid MIG instance, MPS share or vGPU fraction could still
    /// take (unheld slices included): `unallocated - stranded`, so that the two add up to the cent.
    #[schema(value_type = String, example = "771.43")]
    pub placeable: Decimal,
    /// The part of `unallocated` that the GPUs' layouts leave to no valid profile or share (compute
    /// without memory, memory without compute), priced with the same weights; rounded once from
    /// its exact figure. Under the `spread` policy it goes to teams with the rest.
    #[schema(value_type = String, example = "0.00")]
    pub stranded: Decimal,
    /// The `(1 - isolation factor)` part of shared slices' cost, carried by the platform.
    #[schema(value_type = String, example = "0.00")]
    pub sharing_discount: Decimal,
    #[schema(value_type = String, example = "0.01")]
    pub rounding_residual: Decimal,
}

/// A GPU model whose price came from a rate card's default.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DefaultPriced {
    pub gpu_model: String,
    pub rate_card: i64,
    #[schema(value_type = String)]
    pub gpu_hours: Decimal,
    #[schema(value_type = String)]
    pub hourly_cost: Decimal,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PeriodBill {
    pub currency: Option<Currency>,
    /// Exact charges, one per (team, model, kind, profile, rate card).
    pub charges: Vec<Charge>,
    /// Each team's lines, rounded once.
    pub lines: BTreeMap<TeamId, Vec<Line>>,
    pub conservation: Conservation,
    pub default_priced: Vec<DefaultPriced>,
    /// Rate card versions that priced some hour of the period.
    pub rate_cards: Vec<i64>,
    /// A figure that came out negative (data that bypassed ingest's checks), if any: such a bill is
    /// never published ([`PeriodBill::publishable`]), though corrections may still be priced from it.
    pub negative: Option<String>,
}

impl PeriodBill {
    /// The bill, if every figure of it may be published: a negative figure is refused rather than
    /// printed.
    pub fn publishable(self) -> Result<PeriodBill, BillingError> {
        match &self.negative {
            Some(why) => Err(BillingError::Negative(why.clone())),
            None => Ok(self),
        }
    }

    pub fn team_total(&self, team: &str) -> Decimal {
        self.lines
            .get(team)
            .map(|ls| ls.iter().map(|l| l.amount).sum())
            .unwrap_or_default()
    }
}

/// Prices a period. `usage` and `presence` carry the rate card version in force for their hours
/// (`None`: none was); `cards` holds every version they name.
// long: charges, idle spread, unallocated capacity and the discount are running sums of one pass
// that the conservation block adds up
pub fn bill(
    usage: &[(UsageAggregate, Option<i64>)],
    presence: &[(PresenceAggregate, Option<i64>)],
    cards: &BTreeMap<i64, RateCard>,
    first_uncovered: Option<String>,
) -> Result<PeriodBill, BillingError> {
    let uncovered =
        usage.iter().any(|(_, c)| c.is_none()) || presence.iter().any(|(_, c)| c.is_none());
    if uncovered {
        return Err(BillingError::NoRateCard(
            first_uncovered.unwrap_or_else(|| "the period's start".to_owned()),
        ));
    }
    let mut used_cards: Vec<i64> = usage
        .iter()
        .filter_map(|(_, c)| *c)
        .chain(presence.iter().filter_map(|(_, c)| *c))
        .collect();
    used_cards.sort_unstable();
    used_cards.dedup();
    // Every version named is at hand, so that the lookups below cannot miss.
    if let Some(missing) = used_cards.iter().find(|c| !cards.contains_key(c)) {
        return Err(BillingError::UnknownRateCard(*missing));
    }
    let mut currencies: Vec<&Currency> = used_cards.iter().map(|c| &cards[c].currency).collect();
    currencies.dedup();
    if currencies.len() > 1 {
        return Err(BillingError::MixedCurrencies(
            currencies
                .iter()
                .map(|c| c.code.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    let currency = currencies.first().map(|c| (*c).clone());
    // The one rounding of each figure: exact in, half to even at the minor unit out.
    let round = |x: &Exact| {
        currency
            .as_ref()
            .map_or_else(|| x.to_decimal(), |c| c.round(x.clone()))
    };

    let charges: Vec<Charge> = usage
        .iter()
        .map(|(u, c)| price(u, &cards[&c.expect("checked above")]))
        .collect();

    let mut fleet_by_card: BTreeMap<i64, Exact> = BTreeMap::new();
    let mut stranded_by_card: BTreeMap<i64, Exact> = BTreeMap::new();
    let mut default_priced = Vec::new();
    for (p, c) in presence {
        let card = &cards[&c.expect("checked above")];
        let (cost, source) = fleet_cost(p, card);
        *fleet_by_card.entry(card.id).or_default() += cost;
        *stranded_by_card.entry(card.id).or_default() += stranded_cost(&p.model, &p.stranded, card);
        if source == PriceSource::Default {
            default_priced.push(DefaultPriced {
                gpu_model: p.model.clone(),
                rate_card: card.id,
                gpu_hours: (p.present_seconds / Decimal::from(3600)).round_dp(6),
                hourly_cost: card.default_hourly_cost,
            });
        }
    }

    // Usage lines: one per charge, rounded once.
    let mut lines: BTreeMap<TeamId, Vec<Line>> = BTreeMap::new();
    for c in &charges {
        lines.entry(c.team.clone()).or_default().push(Line {
            key: LineKey {
                kind: LineKind::Usage,
                gpu_model: Some(c.model.clone()),
                slice_kind: Some(c.kind),
                profile: c.profile.clone(),
                rate_card: c.rate_card,
            },
            price_source: Some(c.price_source),
            slice_hours: c.slice_hours,
            gpu_equivalent_hours: c.gpu_equivalent_hours,
            unit_price: Some(c.unit_price),
            exact_amount: c.amount.to_decimal(),
            amount: round(&c.amount),
            windows: c.windows,
            corrects: None,
            billed_before: None,
        });
    }

    // Unallocated capacity per rate card version; spread over teams where its policy says so.
    let mut unallocated = Exact::zero();
    let mut stranded = Exact::zero();
    let mut discount = Exact::zero();
    for (&card_id, fleet) in &fleet_by_card {
        let of_card: Vec<&Charge> = charges.iter().filter(|c| c.rate_card == card_id).collect();
        let allocated: Exact = of_card.iter().map(|c| &c.allocated).sum();
        discount += of_card.iter().map(|c| c.discount()).sum::<Exact>();
        let idle = fleet - &allocated;
        let charged: Exact = of_card.iter().map(|c| &c.amount).sum();
        if cards[&card_id].idle_policy == IdlePolicy::Spread && charged > Exact::zero() {
            let mut by_team: BTreeMap<&TeamId, Exact> = BTreeMap::new();
            for c in &of_card {
                *by_team.entry(&c.team).or_default() += &c.amount;
            }
            let mut spread_total = Exact::zero();
            for (team, amount) in by_team {
                let part = &idle * &amount / &charged;
                spread_total += &part;
                lines.entry(team.clone()).or_default().push(Line {
                    key: LineKey {
                        kind: LineKind::IdleSpread,
                        gpu_model: None,
                        slice_kind: None,
                        profile: None,
                        rate_card: card_id,
                    },
                    price_source: None,
                    slice_hours: Decimal::ZERO,
                    gpu_equivalent_hours: Decimal::ZERO,
                    unit_price: None,
                    exact_amount: part.to_decimal(),
                    amount: round(&part),
                    windows: 0,
                    corrects: None,
                    billed_before: None,
                });
            }
            // Spread whole (the parts add up to `idle` exactly), stranded capacity with it.
            unallocated += idle - spread_total;
        } else {
            unallocated += idle;
            stranded += stranded_by_card.remove(&card_id).unwrap_or_default();
        }
    }
    // Usage of hours whose GPUs were not present is impossible by ingest's contract; charges of a
    // card with no presence would still be accounted: fleet cost 0, unallocated negative.
    for c in &charges {
        if !fleet_by_card.contains_key(&c.rate_card) {
            unallocated = unallocated - &c.allocated;
            discount += c.discount();
        }
    }

    for team_lines in lines.values_mut() {
        team_lines.sort_by(|a, b| a.key.cmp(&b.key));
    }
    let fleet_cost = round(&fleet_by_card.values().sum());
    let sum_of = |paying: bool| -> Decimal {
        lines
            .iter()
            .filter(|(team, _)| team.is_unattributed() != paying)
            .flat_map(|(_, ls)| ls)
            .map(|l| l.amount)
            .sum()
    };
    let team_charges = sum_of(true);
    let unattributed = sum_of(false);
    // Rounded once; a rounded zero is written without a sign.
    let unsigned = |mut d: Decimal| {
        if d.is_zero() {
            d.set_sign_positive(true);
        }
        d
    };
    let unallocated = unsigned(round(&unallocated));
    // Stranded rounded once; placeable is what is left of unallocated, so that the two add up to it
    // to the cent (rounding half to even is monotone: stranded <= unallocated stays so rounded).
    let stranded = unsigned(round(&stranded));
    let placeable = unsigned(unallocated - stranded);
    let sharing_discount = unsigned(round(&discount));
    let negative = [
        ("unallocated capacity", unallocated),
        ("placeable unallocated capacity", placeable),
        ("the sharing discount", sharing_discount),
        ("the fleet cost", fleet_cost),
    ]
    .into_iter()
    .find(|(_, v)| v.is_sign_negative() && !v.is_zero())
    .map(|(what, v)| format!("{what} would be {v}"));
    let conservation = Conservation {
        fleet_cost,
        team_charges,
        unattributed,
        unallocated,
        placeable,
        stranded,
        sharing_discount,
        rounding_residual: fleet_cost
            - team_charges
            - unattributed
            - unallocated
            - sharing_discount,
    };
    Ok(PeriodBill {
        currency,
        charges,
        lines,
        conservation,
        default_priced,
        rate_cards: used_cards,
        negative,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;
    use rust_decimal_macros::dec;

    use super::*;
    use crate::billing::rate_card::IsolationFactors;
    use crate::domain::slice::{GpuGeometry, Reservation, ShareWeights};
    use crate::domain::usage::{ExactSums, OccupancySums};

    const H100_MODEL: &str = "NVIDIA H100 80GB HBM3";
    const H100: GpuGeometry = GpuGeometry {
        memory_bytes: 85_520_809_984,
        compute_slices: 7,
        memory_slices: 8,
    };

    fn card(id: i64, cost: Decimal, policy: IdlePolicy) -> RateCard {
        RateCard {
            id,
            effective_from: "2026-01-01T00:00:00Z".parse().unwrap(),
            currency: Currency::parse("USD").unwrap(),
            weights: ShareWeights::default(),
            factors: IsolationFactors::default(),
            idle_policy: policy,
            prices: BTreeMap::from([(H100_MODEL.to_owned(), cost)]),
            default_hourly_cost: dec!(3.00),
            note: None,
        }
    }

    fn mig_held(
        team: &str,
        profile: &str,
        c: u8,
        m: u8,
        seconds: Decimal,
        card: i64,
    ) -> (UsageAggregate, Option<i64>) {
        let share = Reservation::Mig {
            profile: profile.into(),
            profile_id: None,
            compute_slices: c,
            memory_slices: m,
            memory_bytes: 1,
        }
        .physical_share(&H100);
        (
            UsageAggregate {
                team: TeamId::parse(team).unwrap(),
                model: H100_MODEL.into(),
                kind: SliceKind::Mig,
                profile: Some(profile.into()),
                rate_card: card,
                slices: 1,
                exact: ExactSums::of_share(&seconds.into(), &Exact::zero(), &Exact::zero(), &share),
                sums: OccupancySums {
                    held_seconds: seconds,
                    held_compute: seconds * share.compute,
                    held_memory: seconds * share.memory,
                    ..Default::default()
                },
            },
            Some(card),
        )
    }

    fn present(seconds: Decimal, card: i64) -> (PresenceAggregate, Option<i64>) {
        (
            PresenceAggregate {
                model: H100_MODEL.into(),
                rate_card: card,
                present_seconds: seconds,
                stranded: Default::default(),
            },
            Some(card),
        )
    }

    #[test]
    fn the_worked_example_accounts_for_every_cent() {
        let month = dec!(720) * dec!(3600);
        let cards = BTreeMap::from([(1, card(1, dec!(4.00), IdlePolicy::Platform))]);
        let usage = [
            mig_held("nlp", "3g.40gb", 3, 4, month, 1),
            mig_held("search", "1g.10gb", 1, 1, month, 1),
            mig_held("vision", "1g.10gb", 1, 1, month, 1),
        ];
        let bill = bill(&usage, &[present(month, 1)], &cards, None).unwrap();
        let amounts: Vec<Decimal> = bill.lines.values().flatten().map(|l| l.amount).collect();
        assert_eq!(amounts, vec![dec!(1337.14), dec!(385.71), dec!(385.71)]);
        let c = &bill.conservation;
        assert_eq!(c.fleet_cost, dec!(2880.00));
        assert_eq!(c.unallocated, dec!(771.43));
        assert_eq!(c.sharing_discount, dec!(0.00));
        assert_eq!(c.team_charges, dec!(2108.56));
        assert_eq!(c.rounding_residual, dec!(0.01));
        // Independent of how the residual is defined: the fleet cost is the card's 720 hours at
        // its rate, and the residual at most half a cent per rounded figure (three lines, the fleet
        // cost, unallocated capacity and the discount).
        assert_eq!(c.fleet_cost, dec!(720) * dec!(4.00));
        assert!(c.rounding_residual.abs() <= dec!(0.005) * dec!(6));
    }

    #[test]
    fn under_the_spread_policy_teams_carry_unallocated_capacity_in_proportion() {
        let month = dec!(720) * dec!(3600);
        let cards = BTreeMap::from([(1, card(1, dec!(4.00), IdlePolicy::Spread))]);
        let usage = [
            mig_held("nlp", "3g.40gb", 3, 4, month, 1),
            mig_held("search", "1g.10gb", 1, 1, month, 1),
        ];
        let bill = bill(&usage, &[present(month, 1)], &cards, None).unwrap();
        let nlp = bill.team_total("nlp");
        let search = bill.team_total("search");
        // Unallocated 1157.142857 splits 1337.14 : 385.71, so nlp carries 898.08 of it and search 259.06.
        // The two teams carry the whole card, 720 hours at its rate, but for rounding: at most half
        // a cent for each of their four lines.
        assert_eq!(bill.conservation.fleet_cost, dec!(720) * dec!(4.00));
        assert!((dec!(720) * dec!(4.00) - (nlp + search)).abs() <= dec!(0.005) * dec!(4));
        assert_eq!(bill.conservation.unallocated, dec!(0.00));
        assert_eq!(nlp, dec!(1337.14) + dec!(898.08));
        assert_eq!(search, dec!(385.71) + dec!(259.06));
        assert!(
            bill.lines["nlp"]
                .iter()
                .any(|l| l.key.kind == LineKind::IdleSpread)
        );
    }

    /// A card that prices a 1g MIG slice (a seventh of the GPU, compute only) at `cost` an hour
    /// and `factor` of it: shares of 1/7 that no decimal holds.
    fn seventh_card(cost: Decimal, factor: Decimal, policy: IdlePolicy) -> BTreeMap<i64, RateCard> {
        let mut c = card(1, cost, policy);
        c.weights = ShareWeights::new(Decimal::ONE, Decimal::ZERO).unwrap();
        c.factors.mig = factor;
        BTreeMap::from([(1, c)])
    }

    #[test]
    fn a_line_on_a_half_cent_rounds_to_the_even_cent() {
        // 7 h x 1/7 = 1 GPU-hour at 29.29 x 0.5: exactly 14.645, billed 14.64.
        let cards = seventh_card(dec!(29.29), dec!(0.5), IdlePolicy::Platform);
        let usage = [mig_held("nlp", "1g.10gb", 1, 1, dec!(25200), 1)];
        let b = bill(&usage, &[present(dec!(25200), 1)], &cards, None).unwrap();
        assert_eq!(b.team_total("nlp"), dec!(14.64));
        // 315 h x 1/7 = 45 GPU-hours at 30.81 x 0.5: exactly 693.225, billed 693.22.
        let cards = seventh_card(dec!(30.81), dec!(0.5), IdlePolicy::Platform);
        let usage = [mig_held("nlp", "1g.10gb", 1, 1, dec!(1134000), 1)];
        let b = bill(&usage, &[present(dec!(1134000), 1)], &cards, None).unwrap();
        assert_eq!(b.team_total("nlp"), dec!(693.22));
    }

    #[test]
    fn the_sharing_discount_on_a_half_cent_rounds_to_the_even_cent() {
        // 1 GPU-hour at 2.93, half of it discounted: exactly 1.465 each side.
        let cards = seventh_card(dec!(2.93), dec!(0.5), IdlePolicy::Platform);
        let usage = [mig_held("nlp", "1g.10gb", 1, 1, dec!(25200), 1)];
        let b = bill(&usage, &[present(dec!(25200), 1)], &cards, None).unwrap();
        assert_eq!(b.team_total("nlp"), dec!(1.46));
        assert_eq!(b.conservation.sharing_discount, dec!(1.46));
        assert_eq!(b.conservation.unallocated, dec!(17.58));
        assert_eq!(b.conservation.fleet_cost, dec!(20.51));
    }

    #[test]
    fn unallocated_capacity_on_a_half_cent_rounds_to_the_even_cent() {
        // 8 h of a GPU at 2.93 (23.44); a seventh of it held 3.5 h (1.465): 21.975 unallocated.
        let cards = seventh_card(dec!(2.93), dec!(1), IdlePolicy::Platform);
        let usage = [mig_held("nlp", "1g.10gb", 1, 1, dec!(12600), 1)];
        let b = bill(&usage, &[present(dec!(28800), 1)], &cards, None).unwrap();
        assert_eq!(b.conservation.unallocated, dec!(21.98));
        assert_eq!(b.team_total("nlp"), dec!(1.46));
    }

    #[test]
    fn a_spread_share_on_a_half_cent_rounds_to_the_even_cent() {
        // 9 h of a GPU at 2.93 (26.37); two teams each hold a seventh of it 7 h (2.93 each), so
        // each carries half of the 20.51 unallocated: exactly 10.255, billed 10.26.
        let cards = seventh_card(dec!(2.93), dec!(1), IdlePolicy::Spread);
        let usage = [
            mig_held("nlp", "1g.10gb", 1, 1, dec!(25200), 1),
            mig_held("search", "1g.10gb", 1, 1, dec!(25200), 1),
        ];
        let b = bill(&usage, &[present(dec!(32400), 1)], &cards, None).unwrap();
        for team in ["nlp", "search"] {
            let spread: Vec<Decimal> = b.lines[team]
                .iter()
                .filter(|l| l.key.kind == LineKind::IdleSpread)
                .map(|l| l.amount)
                .collect();
            assert_eq!(spread, vec![dec!(10.26)], "{team}");
        }
        assert_eq!(b.conservation.unallocated, dec!(0.00));
        assert_eq!(b.conservation.rounding_residual, dec!(-0.01));
    }

    #[test]
    fn a_month_whose_slices_held_more_than_its_gpus_had_is_never_published() {
        let month = dec!(720) * dec!(3600);
        let cards = BTreeMap::from([(1, card(1, dec!(4.00), IdlePolicy::Platform))]);
        // Two whole cards' worth of MIG 7g on one GPU's presence: data ingest would have refused.
        let usage = [
            mig_held("nlp", "7g.80gb", 7, 8, month, 1),
            mig_held("search", "7g.80gb", 7, 8, month, 1),
        ];
        let b = bill(&usage, &[present(month, 1)], &cards, None).unwrap();
        assert_eq!(
            b.negative.as_deref(),
            Some("unallocated capacity would be -2880.00")
        );
        let err = b.publishable().unwrap_err();
        assert!(
            err.to_string()
                .contains("the figures of the period do not add up"),
            "{err}"
        );
    }

    /// One hour of one H100 at 4.00 with `held` held by nlp all hour and the layout stranding
    /// `stranded` (MIG compute and memory slices, MPS thread percent, pinned bytes): its
    /// (unallocated, placeable, stranded).
    fn split_of_an_hour(held: &[Reservation], stranded: (u8, u8, u8, u64)) -> [Decimal; 3] {
        let hour = dec!(3600);
        let cards = BTreeMap::from([(1, card(1, dec!(4.00), IdlePolicy::Platform))]);
        let usage: Vec<_> = held
            .iter()
            .map(|r| {
                let share = r.physical_share(&H100);
                (
                    UsageAggregate {
                        team: TeamId::parse("nlp").unwrap(),
                        model: H100_MODEL.into(),
                        kind: r.kind(),
                        profile: None,
                        rate_card: 1,
                        slices: 1,
                        exact: ExactSums::of_share(
                            &hour.into(),
                            &Exact::zero(),
                            &Exact::zero(),
                            &share,
                        ),
                        sums: OccupancySums {
                            held_seconds: hour,
                            ..Default::default()
                        },
                    },
                    Some(1),
                )
            })
            .collect();
        let (c, m, t, b) = stranded;
        let mut presence = present(hour, 1);
        presence.0.stranded = crate::billing::pricing::StrandedSeconds::of_gpu(
            &H100,
            Decimal::from(c) * hour,
            Decimal::from(m) * hour,
            Decimal::from(t) * hour,
            Decimal::from(b) * hour,
        );
        let bill = bill(&usage, &[presence], &cards, None).unwrap();
        let k = &bill.conservation;
        assert_eq!(k.fleet_cost, dec!(4.00));
        assert_eq!(k.unallocated, k.placeable + k.stranded);
        [k.unallocated, k.placeable, k.stranded]
    }

    fn mig(c: u8, m: u8) -> Reservation {
        Reservation::Mig {
            profile: format!("{c}g"),
            profile_id: None,
            compute_slices: c,
            memory_slices: m,
            memory_bytes: 1,
        }
    }

    #[test]
    fn unallocated_capacity_splits_into_placeable_and_stranded_priced_with_the_rate_cards_weights()
    {
        // 3g.40gb at 0 and at 4 leave one compute slice of seven and no memory slice: the hour's
        // unallocated 4.00 x 0.5 x 1/7 = 0.2857 is all stranded.
        assert_eq!(
            split_of_an_hour(&[mig(3, 4), mig(3, 4)], (1, 0, 0, 0)),
            [dec!(0.29), dec!(0.00), dec!(0.29)]
        );
        // Four 1g.20gb: three compute slices with no memory, 4.00 x 0.5 x 3/7 = 0.8571.
        assert_eq!(
            split_of_an_hour(&[mig(1, 2), mig(1, 2), mig(1, 2), mig(1, 2)], (3, 0, 0, 0)),
            [dec!(0.86), dec!(0.00), dec!(0.86)]
        );
        // Seven 1g.10gb (DESIGN.md: the eighth memory slice has no compute, so not "nothing
        // unallocated"): 4.00 x 0.5 x 1/8 = 0.25, all of it stranded.
        assert_eq!(
            split_of_an_hour(&vec![mig(1, 1); 7], (0, 1, 0, 0)),
            [dec!(0.25), dec!(0.00), dec!(0.25)]
        );
        // An empty MIG card: all placeable.
        assert_eq!(
            split_of_an_hour(&[], (0, 0, 0, 0)),
            [dec!(4.00), dec!(4.00), dec!(0.00)]
        );
        // `-cgi 9,19,19` held, a 2g.20gb still fits: 4.00 x (0.5 x 2/7 + 0.5 x 2/8) = 1.0714
        // unallocated, all placeable.
        assert_eq!(
            split_of_an_hour(&[mig(3, 4), mig(1, 1), mig(1, 1)], (0, 0, 0, 0)),
            [dec!(1.07), dec!(1.07), dec!(0.00)]
        );
        // MPS at 100 % of the threads, 2 x 30 GiB pinned of 85,520,809,984 bytes: the memory left,
        // 21,096,300,544 bytes, is stranded: 4.00 x 0.5 x 21096300544 / 85520809984 = 0.4934.
        let gib = 1u64 << 30;
        let client = Reservation::Mps {
            active_thread_percentage: 50,
            pinned_memory_bytes: 30 * gib,
        };
        assert_eq!(
            split_of_an_hour(
                &[client.clone(), client],
                (0, 0, 0, H100.memory_bytes - 60 * gib)
            ),
            [dec!(0.49), dec!(0.00), dec!(0.49)]
        );
        // A time-sliced card strands nothing (a replica reserves nothing): what its replicas did
        // not use is placeable. One replica busy half the hour: 4.00 x 0.5 x 1/2 = 1.00 used,
        // 3.00 placeable.
        let replica = Reservation::Timeslice {
            replicas: 4,
            replica: 0,
        };
        let mut share = replica.physical_share(&H100);
        share.compute = Decimal::ONE;
        share.memory = Decimal::ONE;
        share.memory_reserved_bytes = H100.memory_bytes;
        let cards = BTreeMap::from([(1, card(1, dec!(4.00), IdlePolicy::Platform))]);
        let hour = dec!(3600);
        let usage = [(
            UsageAggregate {
                team: TeamId::parse("nlp").unwrap(),
                model: H100_MODEL.into(),
                kind: SliceKind::Timeslice,
                profile: None,
                rate_card: 1,
                slices: 1,
                exact: ExactSums::of_share(
                    &hour.into(),
                    &dec!(1800).into(),
                    &Exact::zero(),
                    &share,
                ),
                sums: OccupancySums {
                    held_seconds: hour,
                    ..Default::default()
                },
            },
            Some(1),
        )];
        let k = bill(&usage, &[present(hour, 1)], &cards, None)
            .unwrap()
            .conservation;
        assert_eq!(
            [k.unallocated, k.placeable, k.stranded, k.sharing_discount],
            [dec!(3.00), dec!(3.00), dec!(0.00), dec!(0.25)]
        );
    }

    #[test]
    fn stranded_on_a_half_cent_rounds_to_the_even_cent_and_placeable_takes_the_rest() {
        // 8 h of a GPU at 2.93, weights compute 1 / memory 0; a 1g held 3.5 h (1.465), and one
        // compute slice stranded for 3.5 h: exactly 1.465, shown 1.46; unallocated 21.975 shown
        // 21.98, so placeable is 20.52 (exactly 20.51: the difference carries the rounding).
        let cards = seventh_card(dec!(2.93), dec!(1), IdlePolicy::Platform);
        let usage = [mig_held("nlp", "1g.10gb", 1, 1, dec!(12600), 1)];
        let mut presence = present(dec!(28800), 1);
        presence.0.stranded = crate::billing::pricing::StrandedSeconds::of_gpu(
            &H100,
            dec!(12600),
            Decimal::ZERO,
            Decimal::ZERO,
            Decimal::ZERO,
        );
        let k = bill(&usage, &[presence], &cards, None)
            .unwrap()
            .conservation;
        assert_eq!(
            [k.unallocated, k.placeable, k.stranded],
            [dec!(21.98), dec!(20.52), dec!(1.46)]
        );
    }

    #[test]
    fn under_the_spread_policy_stranded_capacity_goes_to_teams_with_the_rest() {
        let cards = BTreeMap::from([(1, card(1, dec!(4.00), IdlePolicy::Spread))]);
        let usage = [
            mig_held("nlp", "3g.40gb", 3, 4, dec!(3600), 1),
            mig_held("search", "3g.40gb", 3, 4, dec!(3600), 1),
        ];
        let mut presence = present(dec!(3600), 1);
        presence.0.stranded = crate::billing::pricing::StrandedSeconds::of_gpu(
            &H100,
            dec!(3600),
            Decimal::ZERO,
            Decimal::ZERO,
            Decimal::ZERO,
        );
        let b = bill(&usage, &[presence], &cards, None).unwrap();
        let k = &b.conservation;
        assert_eq!(
            [k.unallocated, k.placeable, k.stranded],
            [dec!(0.00), dec!(0.00), dec!(0.00)]
        );
        // Each team carries half of the stranded 0.2857: 1.857142 + 0.142857 = 2.00.
        assert_eq!(b.team_total("nlp"), dec!(1.86) + dec!(0.14));
    }

    #[test]
    fn hours_without_a_rate_card_are_an_error_not_zero() {
        let err = bill(
            &[(mig_held("nlp", "3g.40gb", 3, 4, dec!(3600), 1).0, None)],
            &[],
            &BTreeMap::new(),
            Some("2026-10-01T00:00:00Z".into()),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("no rate card is in force"),
            "{err}"
        );
    }

    /// Priced usage, presence and the rate cards behind them.
    type Fleet = (
        Vec<(UsageAggregate, Option<i64>)>,
        Vec<(PresenceAggregate, Option<i64>)>,
        BTreeMap<i64, RateCard>,
    );

    /// A random fleet: GPUs cut into MIG, MPS, vGPU, time-sliced or whole slices, held for random
    /// parts of a random number of hours, under one or two rate cards with random prices, factors,
    /// weights and idle policies.
    // long: one generator; its parts (GPUs, consumers, cards) only make sense drawn together.
    fn fleet() -> impl Strategy<Value = Fleet> {
        let gpu = (
            0usize..5,
            1u32..=744,
            proptest::collection::vec((0u32..=100, 0usize..4, 0u32..=100, 0u32..=100), 1..8),
            0usize..2,
        );
        let rate = (
            1u32..=2000,
            0u32..=100,
            50u32..=100,
            50u32..=100,
            0u32..=100,
            any::<bool>(),
            0u32..4,
        );
        (
            proptest::collection::vec(gpu, 1..12),
            proptest::collection::vec(rate, 2),
        )
            .prop_map(|(gpus, rates)| {
                let mut cards = BTreeMap::new();
                for (i, (cost, wc, f_mps, f_vgpu, f_ts, spread, currency)) in
                    rates.into_iter().enumerate()
                {
                    let id = i as i64 + 1;
                    let mut c = card(
                        id,
                        Decimal::new(i64::from(cost), 2),
                        if spread {
                            IdlePolicy::Spread
                        } else {
                            IdlePolicy::Platform
                        },
                    );
                    c.currency =
                        Currency::parse(["USD", "EUR", "JPY", "KWD"][currency as usize]).unwrap();
                    c.weights = ShareWeights::new(
                        Decimal::new(i64::from(wc), 2),
                        Decimal::ONE - Decimal::new(i64::from(wc), 2),
                    )
                    .unwrap();
                    c.factors.mps = Decimal::new(i64::from(f_mps), 2);
                    c.factors.vgpu = Decimal::new(i64::from(f_vgpu), 2);
                    c.factors.timeslice = Decimal::new(i64::from(f_ts), 2);
                    cards.insert(id, c);
                }
                // One currency per period.
                let code = cards[&1].currency.clone();
                for c in cards.values_mut() {
                    c.currency = code.clone();
                }
                let mut usage = Vec::new();
                let mut presence = Vec::new();
                for (g, (layout, hours, slices, card_pick)) in gpus.into_iter().enumerate() {
                    let card_id = card_pick as i64 + 1;
                    let present_s = Decimal::from(hours) * dec!(3600);
                    presence.push(present(present_s, card_id));
                    let reservations: Vec<Reservation> = match layout {
                        0 => vec![(3, 4), (2, 2), (1, 1), (1, 1)]
                            .into_iter()
                            .map(|(c, m)| Reservation::Mig {
                                profile: format!("{c}g"),
                                profile_id: None,
                                compute_slices: c,
                                memory_slices: m,
                                memory_bytes: 1,
                            })
                            .collect(),
                        1 => vec![
                            Reservation::Mps {
                                active_thread_percentage: 25,
                                pinned_memory_bytes: H100.memory_bytes / 4
                            };
                            4
                        ],
                        2 => vec![
                            Reservation::Vgpu {
                                fraction: dec!(0.5)
                            };
                            2
                        ],
                        3 => (0..4)
                            .map(|r| Reservation::Timeslice {
                                replicas: 4,
                                replica: r,
                            })
                            .collect(),
                        _ => vec![Reservation::Whole],
                    };
                    for (k, r) in reservations.iter().enumerate() {
                        let Some(&(held_pct, team, busy, mem)) = slices.get(k % slices.len())
                        else {
                            continue;
                        };
                        let share = r.physical_share(&H100);
                        let held = present_s * Decimal::from(held_pct) / dec!(100);
                        // Time-sliced replicas share the GPU: each uses at most a quarter of it.
                        let scale = if r.kind() == SliceKind::Timeslice {
                            dec!(0.25)
                        } else {
                            Decimal::ONE
                        };
                        let active = held * Decimal::from(busy) / dec!(100) * scale;
                        let memory_byte_seconds =
                            Exact::from(held * Decimal::from(mem) / dec!(100) * scale)
                                * Exact::from(share.memory_reserved_bytes as i64);
                        usage.push((
                            UsageAggregate {
                                team: TeamId::parse(
                                    ["nlp", "vision", "search", "unattributed"][team],
                                )
                                .unwrap(),
                                model: if g % 3 == 2 {
                                    "Tesla T4".into()
                                } else {
                                    H100_MODEL.into()
                                },
                                kind: r.kind(),
                                profile: None,
                                rate_card: card_id,
                                slices: 1,
                                exact: ExactSums::of_share(
                                    &held.into(),
                                    &active.into(),
                                    &memory_byte_seconds,
                                    &share,
                                ),
                                sums: OccupancySums {
                                    held_seconds: held,
                                    held_compute: held * share.compute,
                                    held_memory: held * share.memory,
                                    known_seconds: held,
                                    known_compute: held * share.compute,
                                    compute_active_seconds: active,
                                    active_compute: active * share.compute,
                                    memory_used: held * share.memory * Decimal::from(mem)
                                        / dec!(100)
                                        * scale,
                                    ..Default::default()
                                },
                            },
                            Some(card_id),
                        ));
                    }
                    if g % 3 == 2 {
                        presence.last_mut().unwrap().0.model = "Tesla T4".into();
                    }
                }
                (usage, presence, cards)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn conservation_holds_to_the_minor_unit_for_random_fleets((usage, presence, cards) in fleet()) {
            let bill = bill(&usage, &presence, &cards, None).unwrap();
            let c = &bill.conservation;
            let currency = bill.currency.clone().unwrap();
            // The fleet cost is every GPU's hours present at its model's rate (the default off the
            // list), looked up here, not by the code under test.
            let at_rate: Decimal = presence.iter().map(|(p, id)| {
                let card = &cards[&id.unwrap()];
                let rate = card.prices.get(&p.model).copied().unwrap_or(card.default_hourly_cost);
                rate * p.present_seconds / dec!(3600)
            }).sum();
            prop_assert_eq!(c.fleet_cost, currency.round(at_rate));
            // Every figure is in minor units...
            for v in [c.fleet_cost, c.team_charges, c.unattributed, c.unallocated, c.sharing_discount, c.rounding_residual] {
                prop_assert_eq!(v, currency.round(v));
            }
            // ...and the residual is only rounding: at most half a minor unit per rounded figure.
            let rounded = bill.lines.values().flatten().count() + 3;
            prop_assert!(c.rounding_residual.abs() <= currency.half_unit() * Decimal::from(rounded as u64),
                "residual {} over {} rounded figures", c.rounding_residual, rounded);
            // Exact before rounding: charges + discount + unallocated = fleet.
            let exact_lines: Exact = bill.lines.values().flatten().map(|l| Exact::from(l.exact_amount)).sum();
            let fleet_exact: Exact = presence.iter().map(|(p, c)| fleet_cost(p, &cards[&c.unwrap()]).0).sum();
            let discount_exact: Exact = bill.charges.iter().map(|ch| ch.discount()).sum();
            let unallocated_exact = fleet_exact - exact_lines - discount_exact;
            prop_assert!((currency.round(unallocated_exact) - c.unallocated).abs() <= currency.half_unit() * Decimal::TWO);
        }
    }
}
