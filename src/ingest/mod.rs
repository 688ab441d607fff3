//! Ingest: a collector's batch, decoded, checked against the contract and stored in one transaction,
//! idempotently on (slice, consumer, window start).

pub mod rollup;
pub mod validate;

use std::io::Read;
use std::time::Instant;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::db::{self, Partitions, ingest::StoreError};
use crate::domain::batch::{Batch, IngestOutcome};
use crate::domain::time::months_touched;
pub use validate::{FieldError, Limits, ValidBatch, validate};

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body is not valid JSON for a batch: {0}")]
    Malformed(String),
    #[error("the batch has invalid fields")]
    Invalid(Vec<FieldError>),
    #[error("the batch contradicts stored data")]
    Conflict(Vec<FieldError>),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

impl From<StoreError> for IngestError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(fields) => IngestError::Conflict(fields),
            StoreError::Db(e) => IngestError::Db(e),
        }
    }
}

/// Decodes a request body, gunzipping it when `gzip` is set, reading at most `limit` bytes of JSON.
pub fn decode(body: &[u8], gzip: bool, limit: usize) -> Result<Batch, IngestError> {
    let json;
    let bytes = if gzip {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(body)
            .take(limit as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| {
                IngestError::Malformed(format!("the gzip body does not decompress: {e}"))
            })?;
        if out.len() > limit {
            return Err(IngestError::TooLarge { limit });
        }
        json = out;
        &json[..]
    } else {
        if body.len() > limit {
            return Err(IngestError::TooLarge { limit });
        }
        body
    };
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            IngestError::Malformed(inner.to_string())
        } else {
            IngestError::Malformed(format!("{path}: {inner}"))
        }
    })
}

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
    let outcome = db::ingest::store(pool, &valid).await;
    let result = match &outcome {
        Ok(_) => "stored",
        Err(StoreError::Conflict(_)) => "conflict",
        Err(StoreError::Db(_)) => "error",
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
