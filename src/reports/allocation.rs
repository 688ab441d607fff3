//! The fleet's allocation by day (the fleet page's chart): GPU-equivalent hours held and busy,
//! from the usage report by day, and the GPU-hours present, read together, kept and read anew
//! behind the request while young.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;

use super::service::{ReportCache, usage_report};
use super::usage::{GroupBy, Step};
use crate::billing::service::Error;
use crate::db::cache::SnapshotCache;
use crate::domain::time::Month;

/// A day's GPU-equivalent hours held (blocked by a slice) and busy, the whole fleet's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DayAllocation {
    pub held: Decimal,
    pub busy: Decimal,
}

/// A month's allocation by day and the GPU-hours present each day, read together: the chart they
/// draw is of one moment, however far behind (a day whose presence were read anew beside a kept
/// allocation would show as unallocated until the read behind the request lands).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MonthAllocation {
    pub days: BTreeMap<DateTime<Utc>, DayAllocation>,
    /// Each day's GPU-hours present (`capacity_by_day`), in order.
    pub capacity: Vec<(DateTime<Utc>, Decimal)>,
}

/// The fleet's allocation by day of each month (the fleet page's chart), kept as right-sizing's
/// evidence is: while the database is unchanged, and served at once after a change while at most
/// `max_age` old, read anew behind the request. Hours, not money: a chart a few minutes behind is
/// still a true chart, where a report's amounts never are.
#[derive(Debug)]
pub struct AllocationCache(SnapshotCache<Month, MonthAllocation>);

impl AllocationCache {
    pub fn new(max_stale: Duration, max_age: Duration) -> Self {
        AllocationCache(SnapshotCache::new(max_stale, 24).revalidating(max_age))
    }

    /// `month`'s allocation by day: the usage report by day, whoever held the slices, summed.
    pub async fn get(
        &self,
        pool: &PgPool,
        reports: &Arc<ReportCache>,
        month: Month,
    ) -> Result<Arc<MonthAllocation>, Error> {
        let (read_pool, reports) = (pool.clone(), reports.clone());
        self.0
            .get_revalidating(pool, month, (), move || async move {
                let daily = usage_report(
                    &read_pool,
                    &reports,
                    month.start(),
                    month.end(),
                    &GroupBy::of(Vec::new()),
                    Step::Day,
                    None,
                )
                .await?;
                let mut days: BTreeMap<DateTime<Utc>, DayAllocation> = BTreeMap::new();
                for r in &daily.rows {
                    let day = days.entry(r.bucket).or_default();
                    day.held += r.figures.gpu_equivalent_hours;
                    day.busy += r.figures.used_gpu_equivalent_hours.unwrap_or_default();
                }
                let capacity = super::store::capacity_by_day(&read_pool, month).await?;
                Ok(MonthAllocation { days, capacity })
            })
            .await
    }
}
