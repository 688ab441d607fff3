//! Right-sizing's evidence kept between requests: the team page's costliest read.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};

use super::store::{self, Evidence};
use crate::db::cache::SnapshotCache;
use crate::domain::team::TeamId;

/// Workloads' evidence (`store::evidence`: percentiles over every hour of every workload, the
/// costliest read of the team page) kept while the database has not changed, as the reports'
/// reads are (`serve --report-max-stale`), by ranges and team: the team page and its CSV (a
/// month and right-sizing's days, read together) share one read, the plan and
/// `/v1/recommendations` (right-sizing's days) another. Under steady ingest the database changes
/// every few seconds and a read takes tens of seconds at 10,000 GPUs, so a kept read at most
/// `serve --kept-max-age` old is served at once and read anew behind the request.
#[derive(Debug)]
pub struct EvidenceCache(SnapshotCache<EvidenceKey, Vec<Vec<Evidence>>, Vec<Range>>);

type Range = (DateTime<Utc>, DateTime<Utc>);

/// The ranges by their days, and the team: right-sizing's range ends at the current hour, so that
/// a kept read of the hour before is still served at once (and read anew behind the request).
type EvidenceKey = (Vec<(NaiveDate, NaiveDate)>, Option<TeamId>);

type EvidenceRead = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Vec<Vec<Evidence>>, sqlx::Error>> + Send>,
>;

impl EvidenceCache {
    /// `max_stale`: how old a kept result may be when served while another request reads it anew;
    /// `max_age`: how old one may be when served at once and read anew behind the request
    /// (zero: never).
    pub fn new(max_stale: Duration, max_age: Duration) -> Self {
        // A team's page asks for two ranges (its month and right-sizing's days) at once: a few
        // keys per team.
        EvidenceCache(SnapshotCache::new(max_stale, 64).revalidating(max_age))
    }

    /// The evidence of each of `ranges` (`[from, to)`), of `team` alone when given, read together.
    pub async fn get(
        &self,
        pool: &sqlx::PgPool,
        ranges: &[Range],
        team: Option<&TeamId>,
    ) -> Result<Arc<Vec<Vec<Evidence>>>, sqlx::Error> {
        let (key, read) = Self::read_of(pool, ranges, team);
        self.0
            .get_revalidating(pool, key, ranges.to_vec(), read)
            .await
    }

    /// The key `ranges` of `team` are kept under, and their read.
    fn read_of(
        pool: &sqlx::PgPool,
        ranges: &[Range],
        team: Option<&TeamId>,
    ) -> (EvidenceKey, impl FnOnce() -> EvidenceRead + Send + 'static) {
        let days = ranges
            .iter()
            .map(|(from, to)| (from.date_naive(), to.date_naive()))
            .collect();
        let (read_pool, exact, read_team) = (pool.clone(), ranges.to_vec(), team.cloned());
        ((days, team.cloned()), move || {
            Box::pin(async move { store::evidence(&read_pool, &exact, read_team.as_ref()).await })
                as EvidenceRead
        })
    }

    /// As [`get`](Self::get), waiting for a read at most `wait`: a request that finds nothing kept
    /// young enough to serve (the first after the server started, or after a long quiet) gets
    /// `None` past it, while the read goes on in a task of its own and keeps its result for the
    /// requests after. A page can then show what it has at once and say the rest is being read,
    /// rather than wait the tens of seconds a month of a large fleet's hourly rows take.
    pub async fn get_within(
        &self,
        pool: &sqlx::PgPool,
        ranges: &[Range],
        team: Option<&TeamId>,
        wait: Duration,
    ) -> Result<Option<Arc<Vec<Vec<Evidence>>>>, sqlx::Error> {
        let (key, read) = Self::read_of(pool, ranges, team);
        self.0
            .get_revalidating_within(pool, key, ranges.to_vec(), read, wait)
            .await
    }
}
