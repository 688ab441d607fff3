//! The unit cost of a period: the definition's counters read from the configured Prometheus (raw
//! samples through a range selector, in chunks; an expression that is not a selector through a
//! subquery at [`SUBQUERY_STEP_MS`]), each hour's increase counted (`count`), and the hour's cost
//! of each pod's slices from the usage report (`reports::service::usage_report`: the rate cards in
//! force, each open month adding up to its invoice lines, an issued month to its issued lines plus
//! the corrections its late data brings), joined (`cost`).

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::UnitDefinition;
use super::cost::{self, CostRow, UnitCostReport, UnitGroupBy};
use super::count::{Increases, Labels};
use crate::billing::rate_card::Currency;
use crate::billing::service::Error as BooksError;
use crate::collector::import::prometheus::{Auth, Prometheus, QueryError};
use crate::domain::team::TeamId;
use crate::reports::service::{self as reports, ReportCache};
use crate::reports::usage::{GroupBy, Step};

/// The resolution at which an expression that is not a selector is read.
pub const SUBQUERY_STEP_MS: i64 = 30_000;
/// How far before the period a series' last sample is looked for: where its counting starts.
const LOOK_BACK_MS: i64 = 10 * 60_000;
/// Each query reads this much time.
const CHUNK_MS: i64 = 6 * 3_600_000;

/// The Prometheus unit definitions are read from (`serve --units-prometheus-url`).
#[derive(Debug, Clone)]
pub struct UnitSource {
    pub url: String,
    pub auth: Auth,
    pub timeout: Duration,
    pub max_answer_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum UnitCostError {
    #[error(transparent)]
    Books(#[from] BooksError),
    #[error(transparent)]
    Prometheus(#[from] QueryError),
    #[error("the units' Prometheus: {0}")]
    Client(String),
}

/// Every hour's increase of `def`'s counters in `[from, to)`.
pub async fn increases(
    source: &UnitSource,
    def: &UnitDefinition,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Increases, UnitCostError> {
    let client = Prometheus::new(
        &source.url,
        source.auth.clone(),
        source.timeout,
        source.max_answer_bytes,
    )
    .map_err(UnitCostError::Client)?;
    let labels = Labels {
        namespace: &def.namespace_label,
        join: def
            .pod_label
            .as_deref()
            .or(def.workload_label.as_deref())
            .unwrap_or("pod"),
        model: def.model_label.as_deref(),
    };
    let selector = super::promql::is_selector(&def.expression);
    let from_ms = from.timestamp_millis();
    // A sample exactly at `to` closes the period's last hour.
    let end_ms = to.timestamp_millis() + 1;
    let mut inc = Increases::default();
    let mut a = from_ms - LOOK_BACK_MS;
    while a < end_ms {
        let b = (a + CHUNK_MS).min(end_ms);
        let series = if selector {
            client.raw(&def.expression, a, b).await?
        } else {
            client
                .subquery(&def.expression, SUBQUERY_STEP_MS, a, b)
                .await?
        };
        inc.add(series, from_ms, &labels);
        a = b;
    }
    Ok(inc)
}

/// The unit cost report of `def` over `[from, to)` (`team`: a team lead's own team only).
#[allow(clippy::too_many_arguments)]
pub async fn unit_cost(
    pool: &PgPool,
    cache: &ReportCache,
    source: &UnitSource,
    def: &UnitDefinition,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: &UnitGroupBy,
    team: Option<&TeamId>,
) -> Result<UnitCostReport, UnitCostError> {
    let mut reports = unit_costs(
        pool,
        cache,
        source,
        def,
        from,
        to,
        std::slice::from_ref(group_by),
        team,
    )
    .await?;
    Ok(reports.remove(0))
}

/// The unit cost reports of `def` over `[from, to)`, one per grouping, from one read of the
/// counters and the books (`team`: a team lead's own team only).
#[allow(clippy::too_many_arguments)]
pub async fn unit_costs(
    pool: &PgPool,
    cache: &ReportCache,
    source: &UnitSource,
    def: &UnitDefinition,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_bys: &[UnitGroupBy],
    team: Option<&TeamId>,
) -> Result<Vec<UnitCostReport>, UnitCostError> {
    let inc = increases(source, def, from, to).await?;
    let dims: GroupBy = "team,namespace,workload,pod"
        .parse()
        .expect("the unit cost's dimensions");
    let usage = reports::usage_report(pool, cache, from, to, &dims, Step::Hour, team).await?;
    let mut costs = Vec::with_capacity(usage.rows.len());
    let mut namespaces = BTreeSet::new();
    for r in &usage.rows {
        let get = |k: &str| r.key.get(k).cloned().flatten();
        namespaces.insert(get("namespace"));
        costs.push(CostRow {
            hour: r.bucket,
            team: get("team"),
            namespace: get("namespace"),
            workload: get("workload"),
            pod: get("pod"),
            cost: r.figures.cost.unwrap_or_default(),
        });
    }
    let currency = usage
        .currency
        .as_deref()
        .and_then(|c| Currency::parse(c).ok());
    tracing::debug!(unit = %def.name, resets = inc.resets, "Counted a unit's increases.");
    Ok(group_bys
        .iter()
        .map(|group_by| {
            cost::build(
                def,
                from,
                to,
                group_by,
                currency.as_ref(),
                usage.cost_note.clone(),
                &costs,
                &inc.hours,
                // A team lead sees units without cost only in namespaces their team's slices were
                // held in.
                |k| team.is_none() || namespaces.contains(&k.namespace),
            )
        })
        .collect())
}
