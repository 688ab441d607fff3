//! The monthly report: per team, what it paid and what it got for it; and the conservation block
//! that accounts for the whole fleet's cost.

use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;

use super::period::{Conservation, DefaultPriced, PeriodBill};
use crate::domain::time::Month;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TeamMonth {
    pub team: String,
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

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MonthlyReport {
    pub period: Month,
    /// ISO 4217; null when nothing was priced.
    pub currency: Option<String>,
    /// Rate card versions that priced some hour of the period.
    pub rate_cards: Vec<i64>,
    pub teams: Vec<TeamMonth>,
    /// Every unit of fleet cost accounted for; omitted for team leads.
    pub conservation: Option<Conservation>,
    /// GPU models missing from the price list, priced at the rate card's default; omitted for team
    /// leads.
    pub default_priced_models: Option<Vec<DefaultPriced>>,
}

/// The report of `bill`; `team` limits it to one team (a team lead's view).
pub fn monthly(month: Month, bill: &PeriodBill, team: Option<&str>) -> MonthlyReport {
    let round = |d: Decimal| bill.currency.as_ref().map_or(d, |c| c.round(d));
    let mut teams: Vec<TeamMonth> = Vec::new();
    for (name, lines) in &bill.lines {
        if team.is_some_and(|t| t != name) {
            continue;
        }
        let charges: Vec<_> = bill.charges.iter().filter(|c| &c.team == name).collect();
        let held: Decimal = charges.iter().map(|c| c.gpu_equivalent_hours).sum();
        let used: Option<Decimal> = charges.iter().map(|c| c.used_gpu_equivalent_hours).sum();
        let idle: Option<Decimal> = charges.iter().map(|c| c.idle_cost()).sum();
        teams.push(TeamMonth {
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
        });
    }
    let everything = team.is_none();
    MonthlyReport {
        period: month,
        currency: bill.currency.as_ref().map(|c| c.code.clone()),
        rate_cards: bill.rate_cards.clone(),
        teams,
        conservation: everything.then(|| bill.conservation.clone()),
        default_priced_models: everything.then(|| bill.default_priced.clone()),
    }
}
