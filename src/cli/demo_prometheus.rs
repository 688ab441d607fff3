//! The demo's own stand-in for a Prometheus that scrapes vLLM, on loopback, for `slicemeter demo`
//! only: `/metrics` is a simulated vLLM's page (the counters of the demo's chat pods now,
//! `sim::vllm`), and `/api/v1/query` answers the one query the unit cost sends for them,
//! `vllm:generation_tokens_total[<range>]` at a time, with their samples, so that the demo's unit
//! cost shows from its first minute. It answers nothing else; the tests of the unit cost read
//! Debian's real `prometheus`.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::sim::SimFleet;
use crate::sim::vllm::{self, GENERATION_TOKENS};
use crate::units::promql::duration_ms;

/// Serves on a free loopback port until the process ends; returns its base URL.
pub async fn start(fleet: SimFleet) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/query", get(query))
        .with_state(Arc::new(fleet));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "The demo's simulated Prometheus stopped.");
        }
    });
    Ok(base)
}

async fn metrics(State(fleet): State<Arc<SimFleet>>) -> Response {
    let now = chrono::Utc::now().timestamp_millis();
    let page = tokio::task::spawn_blocking(move || vllm::exposition(&fleet, now))
        .await
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], page).into_response()
}

#[derive(Deserialize)]
struct QueryParams {
    query: String,
    time: String,
}

/// A Prometheus error answer.
fn bad(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"status": "error", "errorType": "bad_data", "error": message})),
    )
        .into_response()
}

async fn query(State(fleet): State<Arc<SimFleet>>, Query(q): Query<QueryParams>) -> Response {
    let span = q
        .query
        .strip_prefix(GENERATION_TOKENS)
        .and_then(|r| r.strip_prefix('['))
        .and_then(|r| r.strip_suffix(']'))
        .and_then(duration_ms);
    let Some(span) = span else {
        return bad(format!(
            "the demo's simulated Prometheus answers only {GENERATION_TOKENS}[<range>], not {:?}",
            q.query
        ));
    };
    let Some(at) = q.time.parse::<f64>().ok().filter(|t| t.is_finite()) else {
        return bad(format!("{:?} is not a time in Unix seconds", q.time));
    };
    let at = (at * 1000.0).round() as i64;
    let series =
        tokio::task::spawn_blocking(move || vllm::generation_tokens(&fleet, at - span, at))
            .await
            .unwrap_or_default();
    let result: Vec<Value> = series
        .into_iter()
        .map(|s| {
            let mut metric: serde_json::Map<String, Value> = s
                .labels
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            metric.insert("__name__".into(), Value::String(s.name));
            let values: Vec<Value> = s
                .samples
                .iter()
                .map(|(t, v)| json!([*t as f64 / 1000.0, v.to_string()]))
                .collect();
            json!({"metric": metric, "values": values})
        })
        .collect();
    Json(json!({"status": "success", "data": {"resultType": "matrix", "result": result}}))
        .into_response()
}
