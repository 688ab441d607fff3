//! One error envelope for every endpoint: `{"error": {"code", "message", "fields"}}`. 5xx bodies say
//! nothing internal; the log says all.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::ingest::{FieldError, IngestError};

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable, machine-readable code, e.g. `invalid_batch`.
    #[schema(example = "invalid_batch")]
    pub code: &'static str,
    /// A sentence for people.
    pub message: String,
    /// Every bad field, where the error is about fields.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldError>,
}

#[derive(Debug)]
pub enum ApiError {
    Unauthorized(String),
    Forbidden(String),
    /// Refused for who the caller is, naming the fields (another node's GPUs).
    ForbiddenFields {
        code: &'static str,
        message: String,
        fields: Vec<FieldError>,
    },
    NotFound(String),
    BadRequest {
        code: &'static str,
        message: String,
        fields: Vec<FieldError>,
    },
    Unprocessable {
        code: &'static str,
        message: String,
        fields: Vec<FieldError>,
    },
    Conflict {
        code: &'static str,
        message: String,
        fields: Vec<FieldError>,
    },
    PayloadTooLarge(String),
    /// The database is unreachable for now; the client should retry.
    Unavailable,
    /// The request ran past the server's time limit.
    Timeout(std::time::Duration),
    /// A token over its rate; retry after this long.
    TooManyRequests {
        message: String,
        retry_after: std::time::Duration,
    },
    Internal(String),
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code: "bad_request",
            message: message.into(),
            fields: Vec::new(),
        }
    }

    pub fn invalid_fields(message: impl Into<String>, fields: Vec<FieldError>) -> Self {
        ApiError::BadRequest {
            code: "invalid_parameters",
            message: message.into(),
            fields,
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
                ApiError::Unavailable
            }
            // Class 08 (connection exception) and 57 (operator intervention: shutdown, restart).
            sqlx::Error::Database(d)
                if d.code()
                    .is_some_and(|c| c.starts_with("08") || c.starts_with("57")) =>
            {
                tracing::warn!(error = %e, "The database went away mid-request.");
                ApiError::Unavailable
            }
            _ => ApiError::Internal(e.to_string()),
        }
    }
}

impl From<IngestError> for ApiError {
    fn from(e: IngestError) -> Self {
        match e {
            IngestError::TooLarge { limit } => ApiError::PayloadTooLarge(format!(
                "the request body is larger than the limit of {} ({limit} bytes); send smaller batches",
                human_bytes(limit)
            )),
            IngestError::Malformed(message) => ApiError::BadRequest {
                code: "malformed_batch",
                message,
                fields: Vec::new(),
            },
            IngestError::Invalid(fields) => ApiError::Unprocessable {
                code: "invalid_batch",
                message: format!(
                    "the batch was refused whole: {} invalid field{}",
                    fields.len(),
                    if fields.len() == 1 { "" } else { "s" }
                ),
                fields,
            },
            IngestError::Conflict(fields) => ApiError::Conflict {
                code: "conflicting_batch",
                message: "the batch was refused whole: it contradicts what is stored".into(),
                fields,
            },
            IngestError::Forbidden(fields) => ApiError::ForbiddenFields {
                code: "not_this_nodes_gpu",
                message: "the batch was refused whole: it reports GPUs that belong to another node"
                    .into(),
                fields,
            },
            IngestError::Db(e) => e.into(),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        ApiError::BadRequest {
            code: "malformed_body",
            message: r.body_text(),
            fields: Vec::new(),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::BadRequest {
            code: "malformed_query",
            message: r.body_text(),
            fields: Vec::new(),
        }
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
        let (status, code, message, fields) = match self {
            ApiError::Unauthorized(m) => (StatusCode::UNAUTHORIZED, "unauthorized", m, vec![]),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, "forbidden", m, vec![]),
            ApiError::ForbiddenFields {
                code,
                message,
                fields,
            } => (StatusCode::FORBIDDEN, code, message, fields),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, "not_found", m, vec![]),
            ApiError::BadRequest {
                code,
                message,
                fields,
            } => (StatusCode::BAD_REQUEST, code, message, fields),
            ApiError::Unprocessable {
                code,
                message,
                fields,
            } => (StatusCode::UNPROCESSABLE_ENTITY, code, message, fields),
            ApiError::Conflict {
                code,
                message,
                fields,
            } => (StatusCode::CONFLICT, code, message, fields),
            ApiError::PayloadTooLarge(m) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                m,
                vec![],
            ),
            ApiError::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the database is unavailable; retry later".to_owned(),
                vec![],
            ),
            ApiError::Timeout(limit) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!(
                    "the request took longer than the server's limit of {} s; retry later",
                    limit.as_secs()
                ),
                vec![],
            ),
            ApiError::TooManyRequests {
                message,
                retry_after,
            } => {
                let mut response = (
                    StatusCode::TOO_MANY_REQUESTS,
                    Json(ErrorBody {
                        error: ErrorDetail {
                            code: "rate_limited",
                            message,
                            fields: vec![],
                        },
                    }),
                )
                    .into_response();
                let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                return response;
            }
            ApiError::Internal(detail) => {
                tracing::error!(%detail, "A request failed with an internal error.");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; the server log has the details".to_owned(),
                    vec![],
                )
            }
        };
        let mut response = (
            status,
            Json(ErrorBody {
                error: ErrorDetail {
                    code,
                    message,
                    fields,
                },
            }),
        )
            .into_response();
        match status {
            StatusCode::SERVICE_UNAVAILABLE => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            StatusCode::UNAUTHORIZED => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}
