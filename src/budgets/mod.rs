//! Budgets per team (issue 15): one monthly budget a team, a fixed amount or the average of its
//! last closed months, with thresholds on what the month has spent (`actual`) or is forecast to
//! (`forecast`). This module checks and stores them, audited in the change's transaction; what a
//! month stands at against its budget is worked out where the spend and the forecast are read
//! (`http::budgets`, from `reports`).

pub mod channel;
pub mod period;
pub mod standing;
pub mod store;
pub mod watch;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;

use crate::audit::{AuditAction, store as audit};
use crate::billing::rate_card::Currency;
use crate::domain::access::Actor;
use crate::domain::fields::FieldError;
use crate::domain::scope::UsageScope;
use crate::domain::team::TeamId;
pub use channel::{Channel, ChannelInput, ChannelView};
pub use period::{BudgetPeriod, PeriodBounds};
use store::BudgetRow;
pub use watch::Watch;

/// The most thresholds a budget has.
pub const MAX_THRESHOLDS: usize = 10;
/// The most closed months an `auto` budget averages.
pub const MAX_AUTO_MONTHS: i64 = 12;

/// What a threshold watches: what the month has spent, or what it is forecast to come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdKind {
    Actual,
    Forecast,
}

/// A share of the budget that, once reached by `kind`'s figure, the month has crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Threshold {
    pub kind: ThresholdKind,
    /// Percent of the budget, 1 to 1000.
    #[schema(minimum = 1, maximum = 1000)]
    pub percent: u16,
}

impl Threshold {
    /// Whether `figure` reaches this threshold of `budget`.
    pub fn crossed_by(&self, figure: Decimal, budget: Decimal) -> bool {
        figure * Decimal::from(100) >= budget * Decimal::from(self.percent)
    }
}

/// A budget's amount: fixed, or the average of the team's last `months` closed months.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetAmount {
    Fixed(Decimal),
    Auto { months: i16 },
}

/// A budget as asked for, each field checked.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetSpec {
    pub amount: BudgetAmount,
    pub currency: Currency,
    pub thresholds: Vec<Threshold>,
    pub watch: Watch,
    /// The part of the team's usage it watches; `None`: all of it.
    pub scope: Option<UsageScope>,
    pub period: BudgetPeriod,
}

/// A threshold as sent, before it is checked.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ThresholdInput {
    /// `actual` or `forecast`.
    #[schema(example = "forecast", pattern = "^(actual|forecast)$")]
    pub kind: String,
    /// Percent of the budget, 1 to 1000.
    #[schema(example = 80, minimum = 1, maximum = 1000)]
    pub percent: i64,
}

impl BudgetSpec {
    /// This spec for `scope` and `period`: a quarter's amount is fixed (`auto` averages months),
    /// and idle and spend-change alerts watch a whole team.
    pub fn for_scope(
        self,
        scope: Option<UsageScope>,
        period: BudgetPeriod,
    ) -> Result<BudgetSpec, Vec<FieldError>> {
        let mut errors = Vec::new();
        if period == BudgetPeriod::Quarter && matches!(self.amount, BudgetAmount::Auto { .. }) {
            errors.push(FieldError::new(
                "amount",
                "a quarter's budget is a fixed amount; auto averages closed months",
            ));
        }
        if scope.is_some() {
            if matches!(self.watch.idle_days, Some(Some(_))) {
                errors.push(FieldError::new(
                    "idle_days",
                    "idle slices are watched on a whole team's budget, not a namespace's or label's",
                ));
            }
            if matches!(self.watch.spend_change, Some(Some(_))) {
                errors.push(FieldError::new(
                    "spend_change",
                    "a day's spend is watched on a whole team's budget, not a namespace's or label's",
                ));
            }
        }
        if errors.is_empty() {
            Ok(BudgetSpec {
                scope,
                period,
                ..self
            })
        } else {
            Err(errors)
        }
    }

    /// Checks `amount` (a decimal, or `auto` with `auto_months`), `currency` (ISO 4217) and
    /// `thresholds`, naming each bad field.
    pub fn parse(
        amount: &str,
        auto_months: Option<i64>,
        currency: &str,
        thresholds: &[ThresholdInput],
    ) -> Result<BudgetSpec, Vec<FieldError>> {
        let mut errors = Vec::new();
        let amount = match (amount, auto_months) {
            ("auto", Some(n)) if (1..=MAX_AUTO_MONTHS).contains(&n) => {
                Some(BudgetAmount::Auto { months: n as i16 })
            }
            ("auto", Some(n)) => {
                errors.push(FieldError::new(
                    "auto_months",
                    format!("{n} is not a number of months from 1 to {MAX_AUTO_MONTHS}"),
                ));
                None
            }
            ("auto", None) => {
                errors.push(FieldError::new(
                    "auto_months",
                    "an auto budget needs the number of closed months it averages",
                ));
                None
            }
            (fixed, months) => {
                if months.is_some() {
                    errors.push(FieldError::new(
                        "auto_months",
                        "only an auto budget averages months",
                    ));
                }
                match fixed.parse::<Decimal>() {
                    Ok(d) if d > Decimal::ZERO && d < Decimal::from(1_000_000_000_000_000_i64) => {
                        Some(BudgetAmount::Fixed(d))
                    }
                    _ => {
                        errors.push(FieldError::new(
                            "amount",
                            format!(
                                "{fixed:?} is neither a positive decimal under 10^15 (\"5000.00\") nor \"auto\""
                            ),
                        ));
                        None
                    }
                }
            }
        };
        let currency = match Currency::parse(currency) {
            Ok(c) => Some(c),
            Err(e) => {
                errors.push(FieldError::new("currency", e));
                None
            }
        };
        if let (Some(BudgetAmount::Fixed(d)), Some(c)) = (amount, &currency)
            && d.scale() > c.minor_units
        {
            errors.push(FieldError::new(
                "amount",
                format!("{d} has more decimals than {} has", c.code),
            ));
        }
        if thresholds.is_empty() || thresholds.len() > MAX_THRESHOLDS {
            errors.push(FieldError::new(
                "thresholds",
                format!("a budget has 1 to {MAX_THRESHOLDS} thresholds"),
            ));
        }
        let mut checked = Vec::new();
        for (i, t) in thresholds.iter().enumerate() {
            let kind = match t.kind.as_str() {
                "actual" => Some(ThresholdKind::Actual),
                "forecast" => Some(ThresholdKind::Forecast),
                other => {
                    errors.push(FieldError::new(
                        format!("thresholds[{i}].kind"),
                        format!("{other:?} is neither actual nor forecast"),
                    ));
                    None
                }
            };
            let percent = match u16::try_from(t.percent) {
                Ok(p) if (1..=1000).contains(&p) => Some(p),
                _ => {
                    errors.push(FieldError::new(
                        format!("thresholds[{i}].percent"),
                        format!("{} is not a percent from 1 to 1000", t.percent),
                    ));
                    None
                }
            };
            if let (Some(kind), Some(percent)) = (kind, percent) {
                let t = Threshold { kind, percent };
                if checked.contains(&t) {
                    errors.push(FieldError::new(
                        format!("thresholds[{i}]"),
                        "the same threshold twice",
                    ));
                }
                checked.push(t);
            }
        }
        match (amount, currency) {
            (Some(amount), Some(currency)) if errors.is_empty() => {
                checked.sort_by_key(|t| (t.kind == ThresholdKind::Forecast, t.percent));
                Ok(BudgetSpec {
                    amount,
                    currency,
                    thresholds: checked,
                    watch: Watch::default(),
                    scope: None,
                    period: BudgetPeriod::Month,
                })
            }
            _ => Err(errors),
        }
    }

    /// The row's columns, with what the budget had (`before`) where the spec leaves it.
    fn columns(&self, before: Option<&BudgetRow>) -> store::Columns {
        let (amount, auto_months) = match self.amount {
            BudgetAmount::Fixed(d) => (Some(d), None),
            BudgetAmount::Auto { months } => (None, Some(months)),
        };
        let (channels, idle_days, spend_change) = self.watch.resolve(before);
        store::Columns {
            scope: self
                .scope
                .as_ref()
                .map_or(String::new(), UsageScope::stored),
            period: self.period,
            amount,
            auto_months,
            currency: self.currency.code.clone(),
            thresholds: serde_json::to_value(&self.thresholds).expect("thresholds are JSON"),
            channels: serde_json::to_value(&channels).expect("channels are JSON"),
            idle_days,
            spend_change,
        }
    }
}

impl store::Columns {
    /// What the audit log keeps of a budget: channel URLs only to their origin.
    fn audited(&self, team: &TeamId) -> serde_json::Value {
        let channels: Vec<Channel> =
            serde_json::from_value(self.channels.clone()).unwrap_or_default();
        let shown: Vec<ChannelView> = channels.iter().map(Channel::redacted).collect();
        serde_json::json!({"team": team, "scope": self.scope, "period": self.period,
                           "amount": self.amount, "auto_months": self.auto_months,
                           "currency": self.currency, "thresholds": self.thresholds,
                           "channels": shown, "idle_days": self.idle_days,
                           "spend_change": self.spend_change})
    }
}

impl BudgetRow {
    /// The stored thresholds (written by [`BudgetSpec`], so well-formed).
    pub fn thresholds(&self) -> Vec<Threshold> {
        serde_json::from_value(self.thresholds.0.clone()).unwrap_or_default()
    }

    /// The stored channels (written by [`Watch`], so well-formed).
    pub fn channels(&self) -> Vec<Channel> {
        serde_json::from_value(self.channels.0.clone()).unwrap_or_default()
    }

    /// The part of the team's usage it watches; `None`: all of it.
    pub fn scope(&self) -> Option<UsageScope> {
        UsageScope::of_stored(&self.scope)
    }

    fn stored(&self) -> store::Columns {
        store::Columns {
            scope: self.scope.clone(),
            period: self.period,
            amount: self.amount,
            auto_months: self.auto_months,
            currency: self.currency.clone(),
            thresholds: self.thresholds.0.clone(),
            channels: self.channels.0.clone(),
            idle_days: self.idle_days,
            spend_change: self.spend_change,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error("there is no team {0:?}")]
    UnknownTeam(String),
    #[error(
        "team {0:?} has a budget for this scope and period already (budget {1}); change that one"
    )]
    TeamHasOne(String, i64),
    #[error("namespace {0:?} is not {1:?}'s (its namespaces: {2})")]
    NotTheTeams(String, String, String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Makes `team`'s budget; audited (`budget.create`).
pub async fn create(
    pool: &PgPool,
    team: &TeamId,
    spec: &BudgetSpec,
    actor: &Actor,
) -> Result<BudgetRow, BudgetError> {
    let mut tx = pool.begin().await?;
    if !store::team_exists(&mut tx, team).await? {
        return Err(BudgetError::UnknownTeam(team.to_string()));
    }
    if let Some(UsageScope::Namespace(ns)) = &spec.scope {
        let theirs = store::namespaces(&mut tx, team).await?;
        if !theirs.contains(ns) {
            return Err(BudgetError::NotTheTeams(
                ns.clone(),
                team.to_string(),
                if theirs.is_empty() {
                    "none".into()
                } else {
                    theirs.join(", ")
                },
            ));
        }
    }
    let columns = spec.columns(None);
    let Some(row) = store::insert(&mut tx, team, &columns).await? else {
        let existing = store::list(&mut tx, Some(team)).await?;
        let id = existing
            .iter()
            .find(|b| b.scope == columns.scope && b.period == columns.period)
            .map_or(0, |b| b.budget_id);
        return Err(BudgetError::TeamHasOne(team.to_string(), id));
    };
    audit::record(
        &mut tx,
        actor,
        AuditAction::BudgetCreate,
        &row.budget_id.to_string(),
        columns.audited(team),
    )
    .await?;
    tx.commit().await?;
    Ok(row)
}

/// Replaces budget `id`'s amount, currency and thresholds, and what `spec.watch` gives; `None` if
/// there is no such budget. Audited (`budget.update`, with what it was).
pub async fn update(
    pool: &PgPool,
    id: i64,
    spec: &BudgetSpec,
    actor: &Actor,
) -> Result<Option<BudgetRow>, BudgetError> {
    let mut tx = pool.begin().await?;
    let Some(before) = store::get(&mut tx, id, true).await? else {
        return Ok(None);
    };
    let columns = spec.columns(Some(&before));
    let row = store::update(&mut tx, id, &columns).await?;
    let mut details = columns.audited(&before.team_id);
    details["before"] = before.stored().audited(&before.team_id);
    audit::record(
        &mut tx,
        actor,
        AuditAction::BudgetUpdate,
        &id.to_string(),
        details,
    )
    .await?;
    tx.commit().await?;
    Ok(Some(row))
}

/// Deletes budget `id`; `false` if there is none. Audited (`budget.delete`, with what it was).
pub async fn delete(pool: &PgPool, id: i64, actor: &Actor) -> Result<bool, BudgetError> {
    let mut tx = pool.begin().await?;
    let Some(before) = store::get(&mut tx, id, true).await? else {
        return Ok(false);
    };
    store::delete(&mut tx, id).await?;
    audit::record(
        &mut tx,
        actor,
        AuditAction::BudgetDelete,
        &id.to_string(),
        before.stored().audited(&before.team_id),
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Every budget (`team`'s only, when given), by team.
pub async fn list(pool: &PgPool, team: Option<&TeamId>) -> Result<Vec<BudgetRow>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    store::list(&mut conn, team).await
}

/// Budget `id`, if there is one.
pub async fn get(pool: &PgPool, id: i64) -> Result<Option<BudgetRow>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    store::get(&mut conn, id, false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(kind: &str, percent: i64) -> ThresholdInput {
        ThresholdInput {
            kind: kind.into(),
            percent,
        }
    }

    #[test]
    fn a_budget_is_a_positive_amount_or_auto_with_its_months_and_sorted_thresholds() {
        let b = BudgetSpec::parse(
            "5000.00",
            None,
            "USD",
            &[t("forecast", 100), t("actual", 80), t("actual", 50)],
        )
        .unwrap();
        assert_eq!(b.amount, BudgetAmount::Fixed("5000.00".parse().unwrap()));
        assert_eq!(
            b.thresholds
                .iter()
                .map(|t| (t.kind, t.percent))
                .collect::<Vec<_>>(),
            vec![
                (ThresholdKind::Actual, 50),
                (ThresholdKind::Actual, 80),
                (ThresholdKind::Forecast, 100)
            ]
        );
        let auto = BudgetSpec::parse("auto", Some(3), "EUR", &[t("actual", 90)]).unwrap();
        assert_eq!(auto.amount, BudgetAmount::Auto { months: 3 });
    }

    #[test]
    fn each_bad_field_is_named() {
        let fields = |r: Result<BudgetSpec, Vec<FieldError>>| -> Vec<String> {
            r.unwrap_err().into_iter().map(|f| f.field).collect()
        };
        assert_eq!(
            fields(BudgetSpec::parse(
                "-5",
                Some(2),
                "usd",
                &[
                    t("spent", 80),
                    t("actual", 0),
                    t("actual", 80),
                    t("actual", 80)
                ]
            )),
            vec![
                "auto_months",
                "amount",
                "currency",
                "thresholds[0].kind",
                "thresholds[1].percent",
                "thresholds[3]"
            ]
        );
        assert_eq!(
            fields(BudgetSpec::parse("auto", Some(13), "USD", &[])),
            vec!["auto_months", "thresholds"]
        );
        assert_eq!(
            fields(BudgetSpec::parse("10.001", None, "USD", &[t("actual", 5)])),
            vec!["amount"],
            "USD has cents"
        );
    }

    #[test]
    fn a_threshold_is_crossed_at_its_share_exactly() {
        let th = Threshold {
            kind: ThresholdKind::Actual,
            percent: 80,
        };
        let budget: Decimal = "1000.00".parse().unwrap();
        assert!(!th.crossed_by("799.99".parse().unwrap(), budget));
        assert!(th.crossed_by("800.00".parse().unwrap(), budget));
    }
}
