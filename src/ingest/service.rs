//! Ingest's service: validates a batch, makes sure its months have partitions, and hands it to the
//! group committer (`group`), with the metrics of each outcome.

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::group::{Committer, GroupCommit};
use super::validate::{Limits, validate};
use super::{IngestError, store};
use crate::db::Partitions;
use crate::domain::batch::{Batch, Coverage, GpuCoverage, IngestOutcome, Period};
use crate::domain::time::months_touched;

/// Ingest as the server runs it: batches validated on their own, then stored in groups.
#[derive(Debug, Clone)]
pub struct Ingestor {
    pool: PgPool,
    partitions: Arc<Partitions>,
    committer: Committer,
}

impl Ingestor {
    /// Starts the group committer on the current Tokio runtime.
    pub fn new(pool: PgPool, partitions: Arc<Partitions>, groups: GroupCommit) -> Self {
        Ingestor {
            committer: Committer::start(pool.clone(), groups),
            pool,
            partitions,
        }
    }

    /// The stored periods of node `node`'s GPUs within `[from, to)`, each clipped to it and
    /// adjacent ones joined.
    pub async fn coverage(
        &self,
        node: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Coverage, IngestError> {
        let mut gpus: Vec<GpuCoverage> = Vec::new();
        for (uuid, start, end) in store::stored_periods(&self.pool, node, from, to).await? {
            let period = Period {
                start: start.max(from),
                end: end.min(to),
            };
            match gpus.last_mut() {
                Some(g) if g.uuid == uuid => match g.periods.last_mut() {
                    Some(last) if last.end >= period.start => last.end = last.end.max(period.end),
                    _ => g.periods.push(period),
                },
                _ => gpus.push(GpuCoverage {
                    uuid,
                    periods: vec![period],
                }),
            }
        }
        Ok(Coverage {
            node: node.to_owned(),
            gpus,
        })
    }

    /// Validates and stores one batch.
    pub async fn ingest(
        &self,
        batch: Batch,
        now: DateTime<Utc>,
        limits: &Limits,
    ) -> Result<IngestOutcome, IngestError> {
        let started = Instant::now();
        let arriving = self.committer.arriving();
        let valid = validate(batch, now, limits).map_err(IngestError::Invalid)?;
        self.partitions
            .ensure(
                &self.pool,
                &months_touched(valid.period_start, valid.period_end),
            )
            .await?;
        let outcome = self.committer.store(valid, arriving).await;
        let result = match &outcome {
            Ok(_) => "stored",
            Err(IngestError::Conflict(_)) => "conflict",
            Err(IngestError::Forbidden(_)) => "forbidden",
            Err(IngestError::Invalid(_)) => "invalid",
            Err(_) => "error",
        };
        metrics::histogram!("slicemeter_ingest_seconds", "result" => result)
            .record(started.elapsed().as_secs_f64());
        let outcome = outcome?;
        metrics::counter!("slicemeter_ingest_windows_total", "result" => "inserted")
            .increment(outcome.inserted);
        metrics::counter!("slicemeter_ingest_windows_total", "result" => "duplicate")
            .increment(outcome.duplicates);
        Ok(outcome)
    }
}
