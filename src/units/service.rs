//! The unit cost of a period: the definition's counters, each hour's increase as `counts` kept it
//! (read back by [`counted`]) or read from the configured Prometheus (a selector's stored samples
//! through remote read where it answers it; else through the query API an hour a point
//! server-side, `hourly`, the hours that are not a steady rise from raw samples; an expression
//! that is not a selector through a subquery at [`SUBQUERY_STEP_MS`]) and counted (`count`), and
//! the hour's cost of each pod's slices as the usage report prices it
//! (`reports::service::pod_hour_costs`: the rate cards in force, each open month adding up to its
//! invoice lines, an issued month to its issued lines plus the corrections its late data brings),
//! both read at once and joined (`cost`).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::{StreamExt, TryStreamExt, stream};
use sqlx::PgPool;

use super::UnitDefinition;
use super::cost::{self, UnitCostReport, UnitGroupBy};
use super::count::{Increases, Labels, SeriesId};
use super::hourly::Start;
use crate::billing::service::Error as BooksError;
use crate::collector::import::prometheus::remote_read::Matcher;
use crate::collector::import::prometheus::{Auth, Prometheus, QueryError, RawSeries};
use crate::domain::team::TeamId;
use crate::reports::service::{self as reports, ReportCache};

/// The resolution at which an expression that is not a selector is read.
pub const SUBQUERY_STEP_MS: i64 = 30_000;
/// How far before the period a series' last sample is looked for: where its counting starts.
const LOOK_BACK_MS: i64 = 10 * 60_000;
/// Each query reads this much time.
const CHUNK_MS: i64 = 6 * HOUR_MS;
/// Each remote read reads this much time (its chunks of two hours cut at the ends).
const REMOTE_READ_MS: i64 = 24 * HOUR_MS;
const HOUR_MS: i64 = 3_600_000;

/// The Prometheus unit definitions are read from (`serve --units-prometheus-url`).
#[derive(Debug, Clone)]
pub struct UnitSource {
    pub url: String,
    pub auth: Auth,
    pub timeout: Duration,
    pub max_answer_bytes: usize,
    /// Read a selector's samples through remote read where the server answers it
    /// ([`remote_increases`]); off: the query API only.
    pub remote_read: bool,
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

/// Every hour's increase of `def`'s counters in `[from, to)`, read from Prometheus: server-side an
/// hour a point (`hourly`), the hours that are not a steady rise read raw; all of it raw where the
/// server cannot answer so (a range not on the hour, a selector of several names). Counting starts
/// where `stood` says each series stood (a count of the hours before ended there, `Increases::last`),
/// or, without it, at each series' last sample in the 10 minutes before `from`.
pub async fn increases(
    source: &UnitSource,
    def: &UnitDefinition,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    stood: Option<&HashMap<SeriesId, f64>>,
) -> Result<Increases, UnitCostError> {
    let client = client(source)?;
    let labels = labels(def);
    if source.remote_read
        && let Some(matchers) = super::promql::matchers(&def.expression)
        && let Some(inc) = remote_increases(&client, &matchers, &labels, from, to, stood).await?
    {
        return Ok(inc);
    }
    let (from_ms, to_ms) = (from.timestamp_millis(), to.timestamp_millis());
    if from_ms.rem_euclid(HOUR_MS) == 0 && to_ms.rem_euclid(HOUR_MS) == 0 && to_ms > from_ms {
        let read = super::hourly::increases(
            &client,
            &def.expression,
            super::promql::is_selector(&def.expression),
            SUBQUERY_STEP_MS,
            stood.map_or(Start::LookBack(LOOK_BACK_MS), Start::Stood),
            from_ms,
            to_ms,
            &labels,
        )
        .await?;
        if let Some(inc) = read {
            return Ok(inc);
        }
    }
    raw_increases(source, def, from, to, stood).await
}

/// Every hour's increase of the series `matchers` match in `[from, to)`, counted from every stored
/// sample as [`raw_increases`] counts, read through remote read's streamed chunks a day a request
/// (compressed chunks, not every sample as JSON text);
/// `None` where the server does not answer remote read (or not all of it in float chunks), or does
/// not say its external labels.
async fn remote_increases(
    client: &Prometheus,
    matchers: &[Matcher],
    labels: &Labels<'_>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    stood: Option<&HashMap<SeriesId, f64>>,
) -> Result<Option<Increases>, UnitCostError> {
    let started = std::time::Instant::now();
    let Some(external) = client.external_labels().await else {
        return Ok(None);
    };
    let from_ms = from.timestamp_millis();
    // A sample exactly at `to` closes the period's last hour.
    let end_ms = to.timestamp_millis() + 1;
    let mut inc = stood.map_or_else(Increases::default, |s| Increases::starting_from(s.clone()));
    // Days in time order, two asked at once: Prometheus reads the next while one is counted.
    let days: Vec<(i64, i64)> = (0..)
        .map(|d| from_ms - LOOK_BACK_MS + d * REMOTE_READ_MS)
        .take_while(|a| *a < end_ms)
        .map(|a| (a, (a + REMOTE_READ_MS).min(end_ms)))
        .collect();
    let mut answers = stream::iter(days)
        .map(|(a, b)| read_span(client, matchers, &external, a, b))
        .buffered(2);
    let (mut reads, mut samples) = (0, 0);
    while let Some(pieces) = answers.try_next().await? {
        // Not answered, or not all in chunks this client reads: the query API reads it all.
        let Some(pieces) = pieces else {
            return Ok(None);
        };
        for series in pieces {
            reads += 1;
            samples += series.iter().map(|s| s.samples.len()).sum::<usize>();
            inc.add(series, from_ms, labels);
        }
    }
    tracing::debug!(
        reads,
        samples,
        seconds = started.elapsed().as_secs_f64(),
        "Read a counter's samples through remote read."
    );
    Ok(Some(inc))
}

/// The series of `[a, b)` read through remote read, in pieces in time order: the span whole, or in
/// halves where an answer would be too large; `None` where the server does not answer it.
async fn read_span(
    client: &Prometheus,
    matchers: &[Matcher],
    external: &[(String, String)],
    a: i64,
    b: i64,
) -> Result<Option<Vec<Vec<RawSeries>>>, QueryError> {
    let mut pieces = Vec::new();
    let mut todo = vec![(a, b)];
    while let Some((a, b)) = todo.pop() {
        match client.read_chunks(matchers, external, a, b).await {
            Ok(Some(series)) => pieces.push(series),
            Ok(None) => return Ok(None),
            Err(e) if e.too_large() && b - a > HOUR_MS => {
                let mid = a + (b - a) / 2;
                todo.push((mid, b));
                todo.push((a, mid));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(pieces))
}

/// Every hour's increase of `def`'s counters in `[from, to)`: the kept hours from PostgreSQL, the
/// others from Prometheus (those after the kept ones counted on from where the kept ones ended).
pub async fn counted(
    pool: &PgPool,
    source: &UnitSource,
    def: &UnitDefinition,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Increases, UnitCostError> {
    let on_the_hour = |t: DateTime<Utc>| t.timestamp().rem_euclid(3600) == 0;
    if !(on_the_hour(from) && on_the_hour(to)) {
        return increases(source, def, from, to, None).await;
    }
    let kept = super::store::kept_counts(pool, &def.name, from, to)
        .await
        .map_err(BooksError::from)?;
    let Some((kept_from, kept_to)) = kept.span.filter(|(f, t)| from < *t && *f < to) else {
        return increases(source, def, from, to, None).await;
    };
    let (a, b) = (from.max(kept_from), to.min(kept_to));
    let mut inc = if from < a {
        increases(source, def, from, a, None).await?
    } else {
        Increases::default()
    };
    if b < to {
        let after = increases(source, def, b, to, Some(&kept.stood)).await?;
        inc.hours.extend(after.hours);
        inc.resets += after.resets;
    }
    inc.hours.extend(kept.hours);
    Ok(inc)
}

/// Every hour's increase of `def`'s counters in `[from, to)`, from every raw sample (from `stood`,
/// as [`increases`]).
pub async fn raw_increases(
    source: &UnitSource,
    def: &UnitDefinition,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    stood: Option<&HashMap<SeriesId, f64>>,
) -> Result<Increases, UnitCostError> {
    let client = client(source)?;
    let labels = labels(def);
    let selector = super::promql::is_selector(&def.expression);
    let from_ms = from.timestamp_millis();
    // A sample exactly at `to` closes the period's last hour.
    let end_ms = to.timestamp_millis() + 1;
    let mut inc = stood.map_or_else(Increases::default, |s| Increases::starting_from(s.clone()));
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

fn client(source: &UnitSource) -> Result<Prometheus, UnitCostError> {
    Prometheus::new(
        &source.url,
        source.auth.clone(),
        source.timeout,
        source.max_answer_bytes,
    )
    .map_err(UnitCostError::Client)
}

fn labels(def: &UnitDefinition) -> Labels<'_> {
    Labels {
        namespace: &def.namespace_label,
        join: def
            .pod_label
            .as_deref()
            .or(def.workload_label.as_deref())
            .unwrap_or("pod"),
        model: def.model_label.as_deref(),
    }
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
    // The counters and the books, read at once.
    let (inc, usage) = tokio::try_join!(counted(pool, source, def, from, to), async {
        reports::pod_hour_costs(pool, cache, from, to, team)
            .await
            .map_err(UnitCostError::from)
    })?;
    // A team lead sees units without cost only in namespaces their team's slices were held in.
    let namespaces: BTreeSet<&Option<String>> =
        usage.sums.places.iter().map(|p| &p.namespace).collect();
    tracing::debug!(unit = %def.name, resets = inc.resets, "Counted a unit's increases.");
    let joined = cost::join(
        def.pod_label.is_some(),
        &usage.sums.teams,
        &usage.sums.places,
        &usage.rows,
        &inc.hours,
    );
    Ok(group_bys
        .iter()
        .map(|group_by| {
            joined.report(
                def,
                from,
                to,
                group_by,
                usage.currency.as_ref(),
                usage.cost_note.clone(),
                |k| team.is_none() || namespaces.contains(&k.namespace),
            )
        })
        .collect())
}
