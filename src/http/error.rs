//! One error envelope for every endpoint: `{"error": {"code", "message", "fields"}}`. Every code the
//! API answers with is an [`ErrorCode`], and its HTTP status is written in [`ErrorCode::status`]
//! and nowhere else; the OpenAPI document lists the codes. 5xx bodies say nothing internal; the log
//! says all.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::fields::FieldError;
use crate::ingest::IngestError;

/// A stable, machine-readable error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: the request cannot be understood.
    BadRequest,
    /// 400: query or path parameters are invalid; `fields` names each.
    InvalidParameters,
    /// 400: the body is not JSON of the expected shape.
    MalformedBody,
    /// 400: the query string cannot be parsed.
    MalformedQuery,
    /// 400: the batch is not JSON of the ingest contract.
    MalformedBatch,
    /// 401: no valid token.
    Unauthorized,
    /// 403: the token's role may not do this.
    Forbidden,
    /// 403: the batch reports GPUs registered to another node; `fields` names each.
    NotThisNodesGpu,
    /// 404: no such resource (or not the caller's team's).
    NotFound,
    /// 409: the batch contradicts what is stored; `fields` names each window or record.
    ConflictingBatch,
    /// 409: a namespace belongs to another team.
    NamespaceTaken,
    /// 409: a change of namespace ownership would reach a month whose invoices are issued, or split
    /// an hour whose raw windows are no longer kept.
    OwnershipConflict,
    /// 409: the rate card version cannot be published or withdrawn.
    RateCardConflict,
    /// 409: the period cannot be billed (not ended, hours without a rate card, ...).
    CannotBill,
    /// 409: the team has a budget already.
    BudgetExists,
    /// 409: the invoice's state does not allow it (not a draft, already issued, out of date, ...).
    InvoiceState,
    /// 409: the period cannot be exported yet.
    CannotExport,
    /// 409: the fleet's layouts cannot be planned (an instance no card of its model can hold).
    CannotPlan,
    /// 413: the body is larger than the limit.
    PayloadTooLarge,
    /// 409: this server reads no Prometheus for units (start it with `--units-prometheus-url`).
    UnitsNotConfigured,
    /// 502: the Prometheus unit definitions are read from did not answer (the message names the
    /// query).
    UnitsUnavailable,
    /// 422: the batch breaks the contract or its bounds; `fields` names every bad field.
    InvalidBatch,
    /// 429: the token is over its rate; see `Retry-After`.
    RateLimited,
    /// 500: a bug; the server log has the details.
    Internal,
    /// 503: the database is unavailable; retry after `Retry-After`.
    Unavailable,
    /// 503: the request ran past the server's time limit.
    Timeout,
}

impl ErrorCode {
    /// Every code, in the order the OpenAPI document lists them.
    pub const ALL: [ErrorCode; 26] = [
        ErrorCode::BadRequest,
        ErrorCode::InvalidParameters,
        ErrorCode::MalformedBody,
        ErrorCode::MalformedQuery,
        ErrorCode::MalformedBatch,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotThisNodesGpu,
        ErrorCode::NotFound,
        ErrorCode::ConflictingBatch,
        ErrorCode::NamespaceTaken,
        ErrorCode::OwnershipConflict,
        ErrorCode::RateCardConflict,
        ErrorCode::CannotBill,
        ErrorCode::BudgetExists,
        ErrorCode::InvoiceState,
        ErrorCode::CannotExport,
        ErrorCode::CannotPlan,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnitsNotConfigured,
        ErrorCode::UnitsUnavailable,
        ErrorCode::InvalidBatch,
        ErrorCode::RateLimited,
        ErrorCode::Internal,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
    ];

    /// The code as it is written on the wire (`payload_too_large`).
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The code's HTTP status: the one place it is written.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::BadRequest
            | ErrorCode::InvalidParameters
            | ErrorCode::MalformedBody
            | ErrorCode::MalformedQuery
            | ErrorCode::MalformedBatch => StatusCode::BAD_REQUEST,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden | ErrorCode::NotThisNodesGpu => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::ConflictingBatch
            | ErrorCode::NamespaceTaken
            | ErrorCode::OwnershipConflict
            | ErrorCode::RateCardConflict
            | ErrorCode::CannotBill
            | ErrorCode::BudgetExists
            | ErrorCode::InvoiceState
            | ErrorCode::CannotExport
            | ErrorCode::CannotPlan
            | ErrorCode::UnitsNotConfigured => StatusCode::CONFLICT,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::UnitsUnavailable => StatusCode::BAD_GATEWAY,
            ErrorCode::InvalidBatch => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Unavailable | ErrorCode::Timeout => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable, machine-readable code; the HTTP status follows from it.
    pub code: ErrorCode,
    /// A sentence for people.
    pub message: String,
    /// Every bad field, where the error is about fields.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldError>,
}

/// An error answer: its code (and so its status), a message, the bad fields, and for 429 when to
/// retry.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub fields: Vec<FieldError>,
    retry_after: Option<Duration>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            fields: Vec::new(),
            retry_after: None,
        }
    }

    pub fn with_fields(
        code: ErrorCode,
        message: impl Into<String>,
        fields: Vec<FieldError>,
    ) -> Self {
        ApiError {
            fields,
            ..ApiError::new(code, message)
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::BadRequest, message)
    }

    pub fn invalid_fields(message: impl Into<String>, fields: Vec<FieldError>) -> Self {
        ApiError::with_fields(ErrorCode::InvalidParameters, message, fields)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::Unauthorized, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::Forbidden, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::NotFound, message)
    }

    pub fn conflict(code: ErrorCode, e: &dyn std::fmt::Display) -> Self {
        ApiError::new(code, e.to_string())
    }

    /// A bug: the detail goes to the log, the client gets a 500 that says nothing internal.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(%detail, "A request failed with an internal error.");
        ApiError::new(
            ErrorCode::Internal,
            "internal error; the server log has the details",
        )
    }

    pub fn unavailable() -> Self {
        ApiError::new(
            ErrorCode::Unavailable,
            "the database is unavailable; retry later",
        )
    }

    pub fn timeout(limit: Duration) -> Self {
        ApiError::new(
            ErrorCode::Timeout,
            format!(
                "the request took longer than the server's limit of {} s; retry later",
                limit.as_secs()
            ),
        )
    }

    pub fn too_many_requests(message: impl Into<String>, retry_after: Duration) -> Self {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(ErrorCode::RateLimited, message)
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::Io(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => {
                tracing::warn!(error = %e, "The database is unavailable.");
                ApiError::unavailable()
            }
            // 57014: the statement timeout (or a cancel) stopped the query.
            sqlx::Error::Database(d) if d.code().as_deref() == Some("57014") => {
                tracing::warn!(error = %e, "A query ran past the statement timeout.");
                ApiError::new(
                    ErrorCode::Timeout,
                    "a query ran past the server's time limit; ask for less at once, or retry later",
                )
            }
            // Class 08 (connection exception) and 57 (operator intervention: shutdown, restart).
            sqlx::Error::Database(d)
                if d.code()
                    .is_some_and(|c| c.starts_with("08") || c.starts_with("57")) =>
            {
                tracing::warn!(error = %e, "The database went away mid-request.");
                ApiError::unavailable()
            }
            _ => ApiError::internal(e),
        }
    }
}

impl From<IngestError> for ApiError {
    fn from(e: IngestError) -> Self {
        match e {
            IngestError::TooLarge { limit } => ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "the request body is larger than the limit of {} ({limit} bytes); send smaller batches",
                    human_bytes(limit)
                ),
            ),
            IngestError::Malformed(message) => ApiError::new(ErrorCode::MalformedBatch, message),
            IngestError::Invalid(fields) => ApiError::with_fields(
                ErrorCode::InvalidBatch,
                format!(
                    "the batch was refused whole: {} invalid field{}",
                    fields.len(),
                    if fields.len() == 1 { "" } else { "s" }
                ),
                fields,
            ),
            IngestError::Conflict(fields) => ApiError::with_fields(
                ErrorCode::ConflictingBatch,
                "the batch was refused whole: it contradicts what is stored",
                fields,
            ),
            IngestError::Forbidden(fields) => ApiError::with_fields(
                ErrorCode::NotThisNodesGpu,
                "the batch was refused whole: it reports GPUs that belong to another node",
                fields,
            ),
            IngestError::NodeNotAllowed(message) => ApiError::forbidden(message),
            e @ (IngestError::RollupOverflow | IngestError::BadFingerprint(_)) => {
                ApiError::internal(e)
            }
            IngestError::Db(e) => e.into(),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        ApiError::new(ErrorCode::MalformedBody, r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::new(ErrorCode::MalformedQuery, r.body_text())
    }
}

pub fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.code.status();
        let mut response = (
            status,
            Json(ErrorBody {
                error: ErrorDetail {
                    code: self.code,
                    message: self.message,
                    fields: self.fields,
                },
            }),
        )
            .into_response();
        let headers = response.headers_mut();
        if let Some(after) = self.retry_after {
            let secs = after.as_secs_f64().ceil().max(1.0) as u64;
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        } else if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Writes each error code's HTTP status into the OpenAPI document's description of `ErrorCode`
/// (`payload_too_large: 413`, ...), from [`ErrorCode::status`], so that a client reads both there.
pub fn describe_codes(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{RefOr, schema::Schema};
    let Some(RefOr::T(Schema::Object(schema))) = doc
        .components
        .as_mut()
        .and_then(|c| c.schemas.get_mut("ErrorCode"))
    else {
        return;
    };
    let statuses: Vec<String> = ErrorCode::ALL
        .iter()
        .map(|c| format!("`{}`: {}", c.name(), c.status().as_u16()))
        .collect();
    schema.description = Some(format!(
        "A stable, machine-readable error code; the HTTP status follows from it. {}.",
        statuses.join(", ")
    ));
}
