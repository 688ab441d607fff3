//! Ingest's service, the one way in for a batch: [`Ingestor::receive`] decodes a request body,
//! checks that its sender may report for the batch's node, and [`Ingestor::ingest`] validates the
//! batch, makes sure its months have partitions and hands it to the group committer (`group`, which
//! owns the transaction), with the metrics and the log line of each outcome.

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::decode::decode;
use super::group::{Committer, GroupCommit};
use super::validate::{Limits, validate};
use super::{IngestError, store};
use crate::db::Partitions;
use crate::domain::access::Principal;
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

    /// A batch as `POST /v1/ingest` receives it: `body` (gunzipped first when `gzip` is set, at
    /// most `body_limit` bytes of JSON) decoded, refused unless `sender` may report for its node,
    /// then validated and stored ([`Ingestor::ingest`]). The windows of a batch refused once read
    /// are counted as refused.
    pub async fn receive(
        &self,
        sender: &Principal,
        body: &[u8],
        gzip: bool,
        body_limit: usize,
        now: DateTime<Utc>,
        limits: &Limits,
    ) -> Result<IngestOutcome, IngestError> {
        let batch = decode(body, gzip, body_limit)?;
        let windows = batch.windows.len() as u64;
        let outcome = match authorise(sender, &batch) {
            Ok(()) => self.ingest(batch, now, limits).await,
            Err(e) => Err(e),
        };
        if outcome.is_err() {
            metrics::counter!("slicemeter_ingest_windows_total", "result" => "refused")
                .increment(windows);
        }
        outcome
    }

    /// Validates and stores one batch (its sender already allowed to report for its node).
    pub async fn ingest(
        &self,
        batch: Batch,
        now: DateTime<Utc>,
        limits: &Limits,
    ) -> Result<IngestOutcome, IngestError> {
        let started = Instant::now();
        let arriving = self.committer.arriving();
        let valid = validate(batch, now, limits).map_err(IngestError::Invalid)?;
        let node = valid.node.clone();
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
            Err(IngestError::Forbidden(foreign)) => {
                tracing::warn!(node = %node, gpus = foreign.len(), "A batch reported GPUs of another node; it was refused.");
                "forbidden"
            }
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

/// Whether `sender` may report for the batch's node; a refusal says whose node the token is for.
fn authorise(sender: &Principal, batch: &Batch) -> Result<(), IngestError> {
    if sender.may_ingest_for(&batch.node) {
        return Ok(());
    }
    Err(IngestError::NodeNotAllowed(match sender {
        Principal::Collector { node, .. } => format!(
            "this collector token reports for node {node:?}, not {:?}",
            batch.node
        ),
        other => format!("a {} token may not ingest", other.role()),
    }))
}
