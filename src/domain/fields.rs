//! The one shape of a refused input: which field, and what is wrong with it. Ingest, rate cards,
//! teams and every query parameter report their bad fields this way; the API sends them in its error
//! envelope's `fields`.

use serde::Serialize;
use utoipa::ToSchema;

/// One bad field of a request: where it is (`windows[17].held_seconds`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FieldError {
    /// A path into the request body: a record by its index, then the field.
    #[schema(example = "windows[17].compute_active_seconds")]
    pub field: String,
    #[schema(example = "compute_active_seconds (75) exceeds held_seconds (60)")]
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}
