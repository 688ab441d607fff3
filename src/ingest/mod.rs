//! Ingest: a collector's batch from the request body to the rollups. `service` is the one way in
//! ([`service::Ingestor::receive`]): it decodes the body (`decode`), checks that the sender may
//! report for the batch's node, validates the batch against the contract (`validate`, `rules`,
//! pure), makes sure its months have partitions and hands it to the group committer, counting each
//! outcome. `group` owns the transaction: it gathers the batches that arrive together and writes
//! them by one path, for a group of many batches or for one batch alone: the GPUs, slices and
//! consumers registered (`registry` decides what a registration allows; `known` remembers what a
//! group need not register again), a re-sent period checked against what is stored (`resent`, for
//! a batch written alone), the windows copied in idempotently on (slice, consumer, window start)
//! and the hourly rollups updated, each window's hours under the team of their time
//! (`attribution`); `store` runs the SQL. This module holds the error every step reports with.

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
    /// The sender's token may not report for the batch's node (the message says whose it is).
    #[error("{0}")]
    NodeNotAllowed(String),
    /// A sum of the hourly rollup overflowed. Validation bounds every figure, so this is a bug,
    /// never the sender's fault.
    #[error("an hourly rollup sum overflowed")]
    RollupOverflow,
    /// A stored consumer's fingerprint is not the 32 bytes ingest writes: the row was not
    /// written by ingest.
    #[error("a consumer fingerprint is not 32 bytes but {0}")]
    BadFingerprint(usize),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}
