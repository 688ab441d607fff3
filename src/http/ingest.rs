//! `POST /v1/ingest`: a collector's batch, stored whole or refused whole.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use chrono::{DateTime, Utc};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, ErrorBody, ErrorCode};
use super::state::AppState;
use crate::domain::access::Principal;
use crate::domain::batch::{Batch, Coverage, IngestOutcome, is_node_name};
use crate::domain::fields::FieldError;
use crate::ingest::IngestError;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(post_ingest))
        .routes(routes!(get_coverage))
}

/// Stores a batch of occupancy windows. Idempotent on (slice, consumer, window start): re-sent windows
/// change nothing and are counted as duplicates. A bad batch is refused whole, naming every bad field.
/// Bodies may be gzip-compressed (`Content-Encoding: gzip`).
#[utoipa::path(post, path = "/v1/ingest", tag = "ingest",
    request_body(content = Batch, content_type = "application/json"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "stored; how many windows were new and how many already stored", body = IngestOutcome),
        (status = 400, description = "not JSON, or not shaped like a batch", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "the token may not report for this node, or the batch names GPUs registered to another node (each named)", body = ErrorBody),
        (status = 409, description = "the batch contradicts stored GPUs, slices, periods or windows (each named)", body = ErrorBody),
        (status = 413, description = "the body is over the size limit", body = ErrorBody),
        (status = 422, description = "invalid fields, each named", body = ErrorBody),
        (status = 429, description = "over the token's rate; see Retry-After", body = ErrorBody),
        (status = 503, description = "the database is unavailable; retry", body = ErrorBody)))]
async fn post_ingest(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<IngestOutcome>, ApiError> {
    let outcome = ingest(&state, &principal, &headers, body).await;
    if let Err(e) = &outcome {
        refused(e);
    }
    outcome.map(Json)
}

/// The interval whose stored periods are asked for.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CoverageParams {
    /// The node.
    #[param(
        required = true,
        example = "gpu-node-01",
        pattern = r"^[A-Za-z0-9._-]{1,253}$"
    )]
    node: Option<String>,
    /// Start, an RFC 3339 instant.
    #[param(required = true, example = "2026-10-01T00:00:00Z", format = DateTime)]
    from: Option<String>,
    /// End (excluded), an RFC 3339 instant, after `from` by at most 31 days.
    #[param(required = true, example = "2026-10-02T00:00:00Z", format = DateTime)]
    to: Option<String>,
}

/// The periods already stored for a node's GPUs within `[from, to)`: what a back-fill (`slicemeter
/// import prometheus`) need not send again. For whoever may ingest for the node.
#[utoipa::path(get, path = "/v1/ingest/coverage", tag = "ingest",
    params(CoverageParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "each GPU's stored time in the interval", body = Coverage),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "the token may not ingest for this node", body = ErrorBody)))]
async fn get_coverage(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<CoverageParams>, QueryRejection>,
) -> Result<Json<Coverage>, ApiError> {
    let Query(p) = params?;
    let mut errors = Vec::new();
    let node = match p.node {
        Some(n) if is_node_name(&n) => Some(n),
        Some(_) => {
            errors.push(FieldError::new(
                "node",
                "node is 1 to 253 letters, digits, '.', '-' or '_'",
            ));
            None
        }
        None => {
            errors.push(FieldError::new("node", "node is required"));
            None
        }
    };
    let mut instant =
        |field: &str, v: Option<String>| match v.as_deref().map(DateTime::parse_from_rfc3339) {
            Some(Ok(t)) => Some(t.with_timezone(&Utc)),
            Some(Err(_)) => {
                errors.push(FieldError::new(
                    field,
                    format!("{field} is not an RFC 3339 instant"),
                ));
                None
            }
            None => {
                errors.push(FieldError::new(field, format!("{field} is required")));
                None
            }
        };
    let (from, to) = (instant("from", p.from), instant("to", p.to));
    if let (Some(from), Some(to)) = (from, to)
        && !(from < to && to - from <= chrono::Duration::days(31))
    {
        errors.push(FieldError::new(
            "to",
            "to must be after from, by at most 31 days",
        ));
    }
    let (Some(node), Some(from), Some(to), true) = (node, from, to, errors.is_empty()) else {
        return Err(ApiError::invalid_fields(
            "the parameters are invalid",
            errors,
        ));
    };
    if !principal.may_ingest_for(&node) {
        return Err(ApiError::forbidden(format!(
            "a {} token may not read node {node:?}'s coverage",
            principal.role()
        )));
    }
    Ok(Json(state.ingestor.coverage(&node, from, to).await?))
}

/// Counts a refused batch by its error code (its windows, once read, are counted by
/// `Ingestor::receive`).
fn refused(e: &ApiError) {
    metrics::counter!("slicemeter_ingest_refusals_total", "reason" => e.code.name()).increment(1);
}

/// Every refusal reason at zero, and the window counters, so that a scrape shows each series before
/// its first event.
pub fn register_metrics() {
    // The codes `POST /v1/ingest` answers with.
    for code in [
        ErrorCode::BadRequest,
        ErrorCode::MalformedBatch,
        ErrorCode::InvalidBatch,
        ErrorCode::ConflictingBatch,
        ErrorCode::Forbidden,
        ErrorCode::NotThisNodesGpu,
        ErrorCode::PayloadTooLarge,
        ErrorCode::RateLimited,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Internal,
    ] {
        metrics::counter!("slicemeter_ingest_refusals_total", "reason" => code.name()).increment(0);
    }
    for result in ["inserted", "duplicate", "refused"] {
        metrics::counter!("slicemeter_ingest_windows_total", "result" => result).increment(0);
    }
}

/// What HTTP has to do before ingest's one way in (`Ingestor::receive`): the token's rate, the
/// body read up to the limit, its `Content-Encoding`.
async fn ingest(
    state: &AppState,
    principal: &Principal,
    headers: &HeaderMap,
    body: Body,
) -> Result<IngestOutcome, ApiError> {
    if let Err(wait) = state
        .ingest_limiter
        .check(principal.token_id(), std::time::Instant::now())
    {
        return Err(ApiError::too_many_requests(
            format!(
                "too many batches from this token: at most {} a second (bursts of {}); retry in {} s",
                state.ingest_limiter.rate(),
                state.ingest_limiter.burst(),
                wait.as_secs_f64().ceil().max(1.0)
            ),
            wait,
        ));
    }
    let limit = state.config.body_limit;
    let bytes = read_body(body, headers, limit).await?;
    let gzip = match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str()) {
        None => false,
        Some(Ok(v)) if v.eq_ignore_ascii_case("gzip") => true,
        Some(Ok(v)) if v.eq_ignore_ascii_case("identity") => false,
        Some(_) => {
            return Err(ApiError::bad_request(
                "Content-Encoding must be gzip or identity",
            ));
        }
    };
    Ok(state
        .ingestor
        .receive(
            principal,
            &bytes,
            gzip,
            limit,
            Utc::now(),
            &state.config.ingest,
        )
        .await?)
}

/// How long the rest of a body over the limit is read and dropped before the 413 goes out.
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// The body, if it is at most `limit` bytes. Past the limit nothing more is kept, but the rest is
/// still read and dropped (for at most [`LINGER`]) before the 413 is sent: a server that answers
/// and closes while the client is still sending makes the client's write fail with a broken pipe,
/// and the client never sees the answer, so it cannot tell "too large" from a network fault.
async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<bytes::Bytes, ApiError> {
    use futures_util::StreamExt;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut stream = body.into_data_stream();
    let mut kept = bytes::BytesMut::new();
    let mut over = declared.is_some_and(|n| n > limit as u64);
    while !over {
        match stream.next().await {
            None => return Ok(kept.freeze()),
            Some(Ok(chunk)) if kept.len() + chunk.len() <= limit => kept.extend_from_slice(&chunk),
            Some(Ok(_)) => over = true,
            Some(Err(e)) => {
                return Err(ApiError::bad_request(format!(
                    "the request body could not be read: {e}"
                )));
            }
        }
    }
    drop(kept);
    let drained = tokio::time::timeout(LINGER, async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
    if drained.is_err() {
        tracing::debug!(
            "A body over the limit was still arriving; answering 413 without the rest."
        );
    }
    Err(IngestError::TooLarge { limit }.into())
}
