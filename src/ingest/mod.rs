//! Ingest: a collector's batch, decoded and checked against the contract (`decode`, `validate`,
//! `rules`, pure), then stored in one transaction that `service` owns: its GPUs, slices and
//! consumers registered (`registry` decides what a registration allows), a re-sent period checked
//! against what is stored (`resent`), the windows copied in idempotently on (slice, consumer, window
//! start) and the hourly rollups updated, each window's hours under the team of their time
//! (`attribution`; `store` runs the SQL). Batches that arrive together are
//! stored in one transaction (`group`). This module holds the error every step reports with.

pub mod attribution;
pub mod decode;
pub mod group;
pub mod known;
pub mod registry;
pub mod resent;
pub mod rules;
pub mod service;
pub mod store;
pub mod validate;

use crate::domain::fields::FieldError;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body is not valid JSON for a batch: {0}")]
    Malformed(String),
    /// Bad fields, or, with what is stored for the same period, more of a card used than it has.
    #[error("the batch has invalid fields")]
    Invalid(Vec<FieldError>),
    /// The batch contradicts what is stored: a GPU or slice described differently, a period that
    /// overlaps one already reported, or windows that clash with stored ones.
    #[error("the batch contradicts stored data")]
    Conflict(Vec<FieldError>),
    #[error("the batch reports another node's GPUs")]
    Forbidden(Vec<FieldError>),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}
