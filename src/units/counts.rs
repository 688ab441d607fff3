//! Kept counts: each unit's hours counted once, after they have settled, and kept in PostgreSQL, so
//! that a unit cost asks the units' Prometheus only for the hours not kept (the last hour or two,
//! and any before a unit's counting started); `service::counted` reads them back. Their figures are
//! those of one read from the unit's first kept hour: the counting goes a UTC day a step, and each
//! step starts where the steps before left each series (`Increases::last` of the series each saw,
//! kept with the hours), not from a look-back. A series unseen for 31 days is forgotten and counts
//! from its first sample again, as a new one.
//!
//! An hour is counted [`SETTLE`] after it ends, what a scrape or a remote write may arrive late by;
//! a sample Prometheus takes in later for a kept hour is not counted. A unit's counting starts at
//! the first hour of the month before the one it was first counted in; a definition whose counting
//! changes is counted again from there (`store::put`).

use chrono::{DateTime, Duration, DurationRound, Utc};
use sqlx::PgPool;

use super::UnitDefinition;
use super::service::{self, UnitCostError, UnitSource};
use super::store;
use crate::billing::service::Error as BooksError;
use crate::domain::time::Month;

/// How long after an hour ends it is counted and kept.
pub const SETTLE: Duration = Duration::minutes(10);
/// The gauge: how far behind each unit's kept counts are (now less the end of its last kept hour).
pub const LAG_GAUGE: &str = "slicemeter_unit_counts_lag_seconds";

/// Counts and keeps every unit's settled hours not yet kept, each unit from where its kept hours
/// end (a unit not counted yet: the first hour of the month before `now`'s) to the last hour that
/// ended [`SETTLE`] before `now`, a UTC day a step, each step kept in its own transaction. A unit
/// whose counting fails is logged and left for the next round; the first error is returned once
/// every unit had its turn.
pub async fn keep(
    pool: &PgPool,
    source: &UnitSource,
    now: DateTime<Utc>,
) -> Result<(), UnitCostError> {
    let mut first_error = None;
    let defs = match store::list(pool).await {
        Ok(defs) => defs,
        Err(e) => {
            tracing::warn!(error = %e, "The unit definitions could not be read; their hours are counted next round.");
            return Err(BooksError::from(e).into());
        }
    };
    for def in defs {
        let def = def.definition;
        if let Err(e) = keep_unit(pool, source, &def, now).await {
            tracing::warn!(unit = %def.name, error = %e, "A unit's hours could not be counted; tried again next round.");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// [`keep`] for one unit.
async fn keep_unit(
    pool: &PgPool,
    source: &UnitSource,
    def: &UnitDefinition,
    now: DateTime<Utc>,
) -> Result<(), UnitCostError> {
    let settled = (now - SETTLE)
        .duration_trunc(Duration::hours(1))
        .expect("an hour divides time");
    let span = store::count_span(pool, &def.name)
        .await
        .map_err(BooksError::from)?;
    let (mut at, mut counted) = match span {
        Some((_, kept_to)) => (kept_to, true),
        None => (Month::of(now).minus(1).start(), false),
    };
    let lag = |kept_to: DateTime<Utc>| {
        metrics::gauge!(LAG_GAUGE, "unit" => def.name.clone())
            .set((now - kept_to).num_seconds() as f64);
    };
    lag(at);
    while at < settled {
        let day = at
            .duration_trunc(Duration::days(1))
            .expect("a day divides time");
        let end = (day + Duration::days(1)).min(settled);
        // From where the kept steps left the series (the first step: from the look-back).
        let stood = if counted {
            let mut conn = pool.acquire().await.map_err(BooksError::from)?;
            Some(
                store::stood(&mut conn, &def.name)
                    .await
                    .map_err(BooksError::from)?,
            )
        } else {
            None
        };
        let inc = service::increases(source, def, at, end, stood.as_ref()).await?;
        if !store::keep_counts(pool, def, at, end, &inc)
            .await
            .map_err(BooksError::from)?
        {
            // Changed meanwhile, or counted by another server: the next round starts anew.
            break;
        }
        lag(end);
        counted = true;
        at = end;
    }
    Ok(())
}
