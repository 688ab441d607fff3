//! Ingest's service: validates a batch, makes sure its months have partitions, and stores it in one
//! transaction, with the metrics of each outcome.

use std::time::Instant;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::validate::{Limits, ValidBatch, validate};
use super::{IngestError, registry, resent, store};
use crate::db::Partitions;
use crate::domain::batch::{Batch, IngestOutcome};
use crate::domain::time::months_touched;
use crate::domain::window::Rollup;

/// Validates and stores one batch.
pub async fn ingest(
    pool: &PgPool,
    partitions: &Partitions,
    batch: Batch,
    now: DateTime<Utc>,
    limits: &Limits,
) -> Result<IngestOutcome, IngestError> {
    let started = Instant::now();
    let valid = validate(batch, now, limits).map_err(IngestError::Invalid)?;
    partitions
        .ensure(pool, &months_touched(valid.period_start, valid.period_end))
        .await?;
    let outcome = store_batch(pool, &valid).await;
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

/// Stores a valid batch in one transaction. Batches that report the same GPU are serialised by the
/// GPUs' advisory locks (taken in one global order, so never a deadlock), so the presence and
/// re-sent checks cannot race.
async fn store_batch(pool: &PgPool, b: &ValidBatch) -> Result<IngestOutcome, IngestError> {
    let mut tx = pool.begin().await?;
    store::lock_gpus(&mut tx, b).await?;
    let gpus = registry::check_gpus(b, &store::register_gpus(&mut tx, b).await?)?;
    for &(gpu, mig) in &gpus.mig_changed {
        store::set_mig_mode(&mut tx, gpu, mig).await?;
    }
    let slices = store::register_slices(&mut tx, b, &gpus.ids).await?;
    let slice_ids = registry::check_slices(b, &gpus.ids, &slices)?;
    let consumer_ids = store::register_consumers(&mut tx, b).await?;
    let overlapping =
        store::overlapping_periods(&mut tx, &gpus.ids, b.period_start, b.period_end).await?;
    let resent = registry::resent_gpus(b, &gpus.ids, &overlapping)?;
    let new_gpus: Vec<i32> = gpus
        .ids
        .iter()
        .copied()
        .filter(|g| !resent.contains(g))
        .collect();
    store::record_presence(&mut tx, b, &new_gpus).await?;
    let fresh = if resent.is_empty() {
        b.windows.iter().collect()
    } else {
        let stored = store::stored_windows(&mut tx, &resent, b.period_start, b.period_end).await?;
        let ids = resent::BatchIds {
            gpus: &gpus.ids,
            slices: &slice_ids,
            consumers: &consumer_ids,
        };
        resent::check(b, ids, &resent, &stored)?
    };
    let new = store::insert_windows(&mut tx, &fresh, &slice_ids, &consumer_ids).await?;
    let mut rollup = Rollup::new();
    for w in &new {
        // Validation bounds every figure, so these sums fit; were one not to, the batch fails whole.
        rollup
            .add((slice_ids[w.slice], consumer_ids[w.consumer]), &w.hours)
            .ok_or_else(|| {
                IngestError::Db(sqlx::Error::Protocol(
                    "an hourly rollup sum overflowed".into(),
                ))
            })?;
    }
    store::add_to_rollup(&mut tx, rollup).await?;
    tx.commit().await?;
    let inserted = new.len() as u64;
    Ok(IngestOutcome {
        inserted,
        duplicates: b.windows.len() as u64 - inserted,
    })
}
