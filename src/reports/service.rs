//! Reports' service: the monthly report of a period, read from billing (the period priced, its books
//! and pending corrections) and from the rollups (consumers no team claims). What a month's report
//! is made of is read once for every team and kept while the database has not changed
//! ([`ReportCache`]), so the fleet page, every team's page and the API share one read; so are the
//! usage report's sums.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::monthly::{self, MonthlyReport, UnattributedConsumer};
use super::store;
use super::usage::{GroupBy, Step, UsageSums};
use crate::billing::period::{Books, Line, PeriodBill, PeriodState};
use crate::billing::service::{self as billing, Error};
use crate::db::cache::SnapshotCache;
use crate::domain::team::TeamId;
use crate::domain::time::Month;

/// What a month's report is made of, for every team at once.
#[derive(Debug)]
pub struct MonthInputs {
    bill: PeriodBill,
    books: Books,
    pending: BTreeMap<TeamId, Vec<Line>>,
    consumers: Vec<UnattributedConsumer>,
}

/// Months' report inputs and usage sums, kept while the database has not changed
/// (`serve --report-max-stale`).
#[derive(Debug)]
pub struct ReportCache {
    months: SnapshotCache<Month, MonthInputs>,
    usage: SnapshotCache<UsageKey, Vec<UsageSums>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct UsageKey {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: GroupBy,
    step: Step,
    team: Option<TeamId>,
}

impl ReportCache {
    /// `max_stale`: how old a kept result may be when served while another request reads it anew.
    pub fn new(max_stale: Duration) -> Self {
        ReportCache {
            months: SnapshotCache::new(max_stale, 240),
            // Any range may be asked for: few are kept.
            usage: SnapshotCache::new(max_stale, 64),
        }
    }
}

/// The usage report's sums (`store::usage_sums`), kept while the database has not changed.
pub async fn usage_sums(
    pool: &PgPool,
    cache: &ReportCache,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: GroupBy,
    step: Step,
    team: Option<&TeamId>,
) -> Result<Arc<Vec<UsageSums>>, sqlx::Error> {
    let key = UsageKey {
        from,
        to,
        group_by,
        step,
        team: team.cloned(),
    };
    cache
        .usage
        .get(pool, key, || {
            store::usage_sums(pool, from, to, group_by, step, team)
        })
        .await
}

impl MonthInputs {
    /// The month priced as billing prices it now (or as issued).
    pub fn bill(&self) -> &PeriodBill {
        &self.bill
    }

    pub fn books(&self) -> &Books {
        &self.books
    }
}

/// What `month`'s report is made of, read once while the database is unchanged.
pub async fn month(
    pool: &PgPool,
    cache: &ReportCache,
    month: Month,
) -> Result<Arc<MonthInputs>, Error> {
    cache
        .months
        .get(pool, month, || month_inputs(pool, month))
        .await
}

async fn month_inputs(pool: &PgPool, month: Month) -> Result<MonthInputs, Error> {
    let (bill, books) = billing::period_bill(pool, month).await?;
    let pending = billing::pending_corrections(pool, month).await?;
    let consumers = store::unattributed_consumers(pool, month.start(), month.end()).await?;
    Ok(MonthInputs {
        bill,
        books,
        pending,
        consumers,
    })
}

/// The monthly report of `month` as of `now` (`team`: a team lead's view of their own team).
pub async fn monthly_report(
    pool: &PgPool,
    cache: &ReportCache,
    month: Month,
    now: DateTime<Utc>,
    team: Option<&TeamId>,
) -> Result<MonthlyReport, Error> {
    let inputs = self::month(pool, cache, month).await?;
    Ok(monthly::monthly(
        month,
        PeriodState::of(month, now, inputs.books.frozen()),
        &inputs.bill,
        &inputs.pending,
        if team.is_none() {
            inputs.consumers.clone()
        } else {
            Vec::new()
        },
        team,
    ))
}

/// What `team` comes to for `month` as billing prices it now: the sum of its invoice lines.
pub async fn team_cost(
    pool: &PgPool,
    cache: &ReportCache,
    month: Month,
    team: &TeamId,
) -> Result<rust_decimal::Decimal, Error> {
    let inputs = self::month(pool, cache, month).await?;
    Ok(inputs.bill.team_total(team.as_str()))
}
