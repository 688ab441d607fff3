//! Each unit's cost of the month so far, kept for `/metrics` and the team page: read behind the
//! requests that show it (a scrape or a page never waits on Prometheus), at most every `max_age`,
//! and anew once a definition changed. The month so far ends at the last complete hour (in a
//! month's first hour: the whole month before). A unit whose counters or books cannot be read is
//! left out of what is kept (its gauge absent) and counted in [`ERRORS_METRIC`].

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, DurationRound, Utc};
use rust_decimal::prelude::ToPrimitive;
use sqlx::PgPool;
use tokio::sync::watch;

use super::UnitDefinition;
use super::cost::{UnitCostReport, UnitGroupBy};
use super::service::{self, UnitSource};
use super::store;
use crate::domain::time::Month;
use crate::reports::gauges::quoted;
use crate::reports::service::ReportCache;

/// The gauge: each unit's cost per team and model, the month so far.
pub const GAUGE: &str = "slicemeter_unit_cost";
/// Reads of a unit's cost for the gauge and the team page that failed.
pub const ERRORS_METRIC: &str = "slicemeter_unit_cost_errors_total";

/// Every unit's cost of `month` up to `to`.
#[derive(Debug)]
pub struct MonthUnitCosts {
    pub month: Month,
    /// The end of the period read: the last complete hour's end.
    pub to: DateTime<Utc>,
    read_at: Instant,
    pub units: Vec<KeptUnit>,
}

/// One unit's month so far, read once, grouped two ways.
#[derive(Debug)]
pub struct KeptUnit {
    pub definition: UnitDefinition,
    /// Per team and model: the gauge.
    pub by_team_model: UnitCostReport,
    /// Per team, workload and model: the team page.
    pub by_workload: UnitCostReport,
}

/// What is kept, and whether a read is under way.
pub struct KeptUnitCosts {
    max_age: Duration,
    kept: watch::Sender<Option<Arc<MonthUnitCosts>>>,
    reading: AtomicBool,
    stale: AtomicBool,
}

impl KeptUnitCosts {
    pub fn new(max_age: Duration) -> Self {
        KeptUnitCosts {
            max_age,
            kept: watch::Sender::new(None),
            reading: AtomicBool::new(false),
            stale: AtomicBool::new(false),
        }
    }

    /// A definition changed: what is kept is read anew on its next use.
    pub fn invalidate(&self) {
        self.stale.store(true, Ordering::SeqCst);
    }

    /// What is kept (none before the first read ends); a read starts behind the caller when it
    /// is older than `max_age`, of another month, or a definition changed.
    pub fn get(
        self: &Arc<Self>,
        pool: &PgPool,
        cache: &Arc<ReportCache>,
        source: &UnitSource,
    ) -> Option<Arc<MonthUnitCosts>> {
        let kept = self.kept.borrow().clone();
        let now = Utc::now();
        let old = kept
            .as_ref()
            .is_none_or(|k| k.read_at.elapsed() >= self.max_age || k.to != last_complete_hour(now));
        if (old || self.stale.load(Ordering::SeqCst)) && !self.reading.swap(true, Ordering::SeqCst)
        {
            self.stale.store(false, Ordering::SeqCst);
            let (me, pool, cache, source) =
                (self.clone(), pool.clone(), cache.clone(), source.clone());
            tokio::spawn(async move {
                let read = read(&pool, &cache, &source, now).await;
                me.kept.send_replace(Some(Arc::new(read)));
                me.reading.store(false, Ordering::SeqCst);
            });
        }
        kept
    }

    /// As [`get`](Self::get), but waiting up to `wait` for the first read when nothing is kept.
    pub async fn get_within(
        self: &Arc<Self>,
        pool: &PgPool,
        cache: &Arc<ReportCache>,
        source: &UnitSource,
        wait: Duration,
    ) -> Option<Arc<MonthUnitCosts>> {
        let mut seen = self.kept.subscribe();
        if let Some(k) = self.get(pool, cache, source) {
            return Some(k);
        }
        let _ = tokio::time::timeout(wait, seen.wait_for(Option::is_some)).await;
        seen.borrow().clone()
    }
}

/// The end of the last complete hour at `now`.
fn last_complete_hour(now: DateTime<Utc>) -> DateTime<Utc> {
    now.duration_trunc(chrono::Duration::hours(1))
        .expect("an hour divides time")
}

/// Every defined unit's cost of the month so far at `now`.
async fn read(
    pool: &PgPool,
    cache: &ReportCache,
    source: &UnitSource,
    now: DateTime<Utc>,
) -> MonthUnitCosts {
    let to = last_complete_hour(now);
    let month = Month::of(to - chrono::Duration::hours(1));
    let mut kept = MonthUnitCosts {
        month,
        to,
        read_at: Instant::now(),
        units: Vec::new(),
    };
    let defs = match store::list(pool).await {
        Ok(defs) => defs,
        Err(e) => {
            tracing::warn!(error = %e, "The unit definitions could not be read; the unit cost gauges are left out.");
            metrics::counter!(ERRORS_METRIC).increment(1);
            return kept;
        }
    };
    let by: [UnitGroupBy; 2] = [
        "team,model".parse().expect("a grouping"),
        "team,workload,model".parse().expect("a grouping"),
    ];
    for def in defs {
        let def = def.definition;
        match service::unit_costs(pool, cache, source, &def, month.start(), to, &by, None).await {
            Ok(mut reports) => {
                let by_workload = reports.pop().expect("two reports");
                let by_team_model = reports.pop().expect("two reports");
                kept.units.push(KeptUnit {
                    definition: def,
                    by_team_model,
                    by_workload,
                });
            }
            Err(e) => {
                tracing::warn!(unit = %def.name, error = %e, "A unit's cost of the month could not be read; its gauge is left out.");
                metrics::counter!(ERRORS_METRIC).increment(1);
            }
        }
    }
    kept.read_at = Instant::now();
    kept
}

/// The gauge in the text exposition format: each unit's cost per team and model, in the
/// definition's `per_units` units; rows in no team, or of several currencies, are left out.
pub fn render(kept: &MonthUnitCosts) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {GAUGE} What the unit cost this month so far (to the last complete hour), per the definition's per_units units."
    );
    let _ = writeln!(out, "# TYPE {GAUGE} gauge");
    for u in &kept.units {
        let Some(currency) = &u.by_team_model.currency else {
            continue;
        };
        for row in &u.by_team_model.rows {
            let get = |k: &str| row.key.get(k).cloned().flatten();
            let (Some(team), Some(cost)) = (get("team"), row.unit_cost) else {
                continue;
            };
            let _ = writeln!(
                out,
                "{GAUGE}{{unit=\"{}\",team=\"{}\",model=\"{}\",currency=\"{}\"}} {}",
                quoted(&u.definition.name),
                quoted(&team),
                quoted(&get("model").unwrap_or_default()),
                quoted(currency),
                cost.to_f64().unwrap_or(f64::NAN)
            );
        }
    }
    out
}
