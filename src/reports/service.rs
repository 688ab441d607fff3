//! Reports' service: the monthly report of a period, read from billing (the period priced, its books
//! and pending corrections) and from the rollups (consumers no team claims).

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::monthly::{self, MonthlyReport};
use super::store;
use crate::billing::period::PeriodState;
use crate::billing::service::{self as billing, Error};
use crate::domain::team::TeamId;
use crate::domain::time::Month;

/// The monthly report of `month` as of `now` (`team`: a team lead's view of their own team).
pub async fn monthly_report(
    pool: &PgPool,
    month: Month,
    now: DateTime<Utc>,
    team: Option<&TeamId>,
) -> Result<MonthlyReport, Error> {
    let (bill, books) = billing::period_bill(pool, month).await?;
    let pending = billing::pending_corrections(pool, month).await?;
    let consumers = if team.is_none() {
        store::unattributed_consumers(pool, month.start(), month.end()).await?
    } else {
        Vec::new()
    };
    Ok(monthly::monthly(
        month,
        PeriodState::of(month, now, books.frozen()),
        &bill,
        &pending,
        consumers,
        team,
    ))
}
