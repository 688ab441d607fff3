//! The monthly report: per team, what it paid and what it got for it; what consumers no team claims
//! held; the conservation block that accounts for the whole fleet's cost; and, for an issued period,
//! the corrections late data is waiting to bring.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;

use crate::billing::period::{Conservation, DefaultPriced, Line, PeriodBill, PeriodState};
use crate::billing::pricing::Charge;
use crate::domain::team::TeamId;
use crate::domain::time::Month;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TeamMonth {
    #[schema(value_type = String)]
    pub team: TeamId,
    /// The sum of the team's invoice lines for the period (before corrections of earlier periods).
    #[schema(value_type = String, example = "1337.14")]
    pub cost: Decimal,
    /// Whole GPUs blocked, in hours.
    #[schema(value_type = String, example = "334.285714")]
    pub gpu_equivalent_hours: Decimal,
    #[schema(value_type = String, example = "720")]
    pub slice_hours: Decimal,
    /// Used over held GPU-equivalent hours; null where compute activity could not be measured.
    #[schema(value_type = Option<String>, example = "0.3605")]
    pub efficiency: Option<Decimal>,
    /// What the idle part of the team's reserved capacity cost; null where efficiency is unknown.
    #[schema(value_type = Option<String>, example = "855.09")]
    pub idle_cost: Option<Decimal>,
    pub windows: i64,
}

/// A consumer no team claims, as the rollups hold it now: attribute it with a `team` label, or by
/// giving its namespace to a team (`PUT /v1/teams/{team}`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UnattributedConsumer {
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    pub unix_user: Option<String>,
    pub job_id: Option<String>,
    #[schema(value_type = String, example = "24")]
    pub slice_hours: Decimal,
}

/// What consumers no team claims held: priced like a team, never invoiced, carried by the platform.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Unattributed {
    #[serde(flatten)]
    pub month: TeamMonth,
    /// The consumers behind it, most held first (at most 50).
    pub consumers: Vec<UnattributedConsumer>,
}

/// One team's corrections waiting for the next open period's invoices.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PendingCorrection {
    #[schema(value_type = String)]
    pub team: TeamId,
    #[schema(value_type = String, example = "44.57")]
    pub amount: Decimal,
    pub lines: Vec<PendingLine>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PendingLine {
    pub description: String,
    #[schema(value_type = String, example = "24")]
    pub slice_hours: Decimal,
    #[schema(value_type = String, example = "44.57")]
    pub amount: Decimal,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MonthlyReport {
    pub period: Month,
    /// `open` (not ended), `closed` (drafts may be made) or `issued` (frozen: these figures are
    /// what was issued, whatever arrived since).
    pub state: PeriodState,
    /// ISO 4217; null when nothing was priced.
    pub currency: Option<String>,
    /// Rate card versions that priced some hour of the period.
    pub rate_cards: Vec<i64>,
    /// The teams that pay (not `unattributed`).
    pub teams: Vec<TeamMonth>,
    /// Every unit of fleet cost accounted for; omitted for team leads.
    pub conservation: Option<Conservation>,
    /// What consumers no team claims held; omitted for team leads and when there is none.
    pub unattributed: Option<Unattributed>,
    /// GPU models missing from the price list, priced at the rate card's default; omitted for team
    /// leads.
    pub default_priced_models: Option<Vec<DefaultPriced>>,
    /// For an issued period: what data that arrived since would change, per team, billed once on
    /// the next open period's invoices as `correction` lines. A team lead sees their own.
    pub pending_corrections: Vec<PendingCorrection>,
}

fn team_month(name: &TeamId, lines: &[Line], charges: &[&Charge], bill: &PeriodBill) -> TeamMonth {
    let round = |d: Decimal| bill.currency.as_ref().map_or(d, |c| c.round(d));
    let held: Decimal = charges.iter().map(|c| c.gpu_equivalent_hours).sum();
    let used: Option<Decimal> = charges.iter().map(|c| c.used_gpu_equivalent_hours).sum();
    let idle: Option<Decimal> = charges.iter().map(|c| c.idle_cost()).sum();
    TeamMonth {
        team: name.clone(),
        cost: lines.iter().map(|l| l.amount).sum(),
        gpu_equivalent_hours: held.round_dp(6).normalize(),
        slice_hours: charges
            .iter()
            .map(|c| c.slice_hours)
            .sum::<Decimal>()
            .round_dp(6)
            .normalize(),
        efficiency: used
            .filter(|_| held > Decimal::ZERO)
            .map(|u| (u / held).round_dp(4).normalize()),
        idle_cost: idle.map(round),
        windows: charges.iter().map(|c| c.windows).sum(),
    }
}

/// The report of `bill`; `team` limits it to one team (a team lead's view).
pub fn monthly(
    month: Month,
    state: PeriodState,
    bill: &PeriodBill,
    pending: &BTreeMap<TeamId, Vec<Line>>,
    unattributed_consumers: Vec<UnattributedConsumer>,
    team: Option<&TeamId>,
) -> MonthlyReport {
    let mut teams: Vec<TeamMonth> = Vec::new();
    let mut unattributed = None;
    for (name, lines) in &bill.lines {
        if team.is_some_and(|t| t != name) {
            continue;
        }
        let charges: Vec<&Charge> = bill.charges.iter().filter(|c| &c.team == name).collect();
        let row = team_month(name, lines, &charges, bill);
        if name.is_unattributed() {
            unattributed = Some(Unattributed {
                month: row,
                consumers: Vec::new(),
            });
        } else {
            teams.push(row);
        }
    }
    let everything = team.is_none();
    if let Some(u) = &mut unattributed {
        u.consumers = unattributed_consumers;
    }
    MonthlyReport {
        period: month,
        state,
        currency: bill.currency.as_ref().map(|c| c.code.clone()),
        rate_cards: bill.rate_cards.clone(),
        teams,
        conservation: everything.then(|| bill.conservation.clone()),
        unattributed: unattributed.filter(|_| everything),
        default_priced_models: everything.then(|| bill.default_priced.clone()),
        pending_corrections: pending
            .iter()
            .filter(|(t, _)| team.is_none_or(|own| own == *t))
            .map(|(t, lines)| PendingCorrection {
                team: t.clone(),
                amount: lines.iter().map(|l| l.amount).sum(),
                lines: lines
                    .iter()
                    .map(|l| PendingLine {
                        description: l.description(),
                        slice_hours: l.slice_hours.round_dp(6).normalize(),
                        amount: l.amount,
                    })
                    .collect(),
            })
            .collect(),
    }
}
