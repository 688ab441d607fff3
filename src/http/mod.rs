//! The HTTP API (DESIGN.md, "HTTP API"): one router per resource, each route registered with its
//! OpenAPI annotation through `utoipa-axum` so that a route and its documentation cannot drift.

mod audit;
pub mod auth;
pub mod error;
mod exports;
mod fleet;
mod health;
mod ingest;
mod invoices;
pub mod limits;
mod rate_cards;
mod reports;
mod teams;
mod ui;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sqlx::PgPool;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

use crate::db::Partitions;
use crate::ingest::Limits;
use crate::reports::exports::ExportConfig;
use error::ApiError;

/// What the server is configured with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The largest request body accepted, before and after gzip.
    pub body_limit: usize,
    pub ingest: Limits,
    pub request_timeout: Duration,
    pub exports: Arc<ExportConfig>,
    /// Ingest requests per second per token (0: unlimited), and the burst allowed.
    pub ingest_rate: f64,
    pub ingest_burst: f64,
    pub billing: crate::billing::BillingConfig,
    /// A connection that has not sent a whole header block in this long is closed.
    pub header_read_timeout: Duration,
    /// A connection on which no byte has moved for this long is closed (longer than the request
    /// timeout, so that a slow request is not cut).
    pub idle_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            body_limit: 16 << 20,
            ingest: Limits::default(),
            request_timeout: Duration::from_secs(60),
            exports: Arc::new(ExportConfig::default()),
            ingest_rate: 20.0,
            ingest_burst: 40.0,
            billing: crate::billing::BillingConfig::default(),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub partitions: Arc<Partitions>,
    pub config: Arc<ServerConfig>,
    pub metrics: PrometheusHandle,
    pub ingest_limiter: Arc<limits::RateLimiter>,
}

impl AppState {
    pub fn new(pool: PgPool, config: ServerConfig) -> Self {
        AppState {
            pool,
            partitions: Arc::new(Partitions::default()),
            ingest_limiter: Arc::new(limits::RateLimiter::new(
                config.ingest_rate,
                config.ingest_burst,
            )),
            config: Arc::new(config),
            metrics: metrics_handle(),
        }
    }
}

/// The process-wide Prometheus recorder; installed once, whatever the number of routers.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ])
                .expect("bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (a host program); ours then only renders.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "slicemeter",
        description = "Chargeback for fractional GPUs: occupancy ingest, usage reports, teams and fleet.",
        license(name = "Apache-2.0")
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "ingest", description = "Occupancy windows from node collectors"),
        (name = "reports", description = "Usage and monthly cost, from the hourly rollups"),
        (name = "billing", description = "Rate cards and invoices"),
        (name = "exports", description = "FOCUS and ERP CSV for finance"),
        (name = "teams", description = "Teams, cost centers and namespaces"),
        (name = "fleet", description = "GPUs, slices and current holders"),
        (name = "operations", description = "Health, readiness, metrics (no token needed) and the audit log")
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        openapi
            .components
            .get_or_insert_default()
            .add_security_scheme(
                "bearer",
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
    }
}

fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(ingest::router())
        .merge(reports::router())
        .merge(rate_cards::router())
        .merge(invoices::router())
        .merge(exports::router())
        .merge(audit::router())
        .merge(teams::router())
        .merge(fleet::router())
        .merge(health::router())
}

/// The OpenAPI document the code describes (`slicemeter openapi`, `GET /openapi.json`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    api().split_for_parts().1
}

/// The whole application: API, operations endpoints and the OpenAPI document.
pub fn router(state: AppState) -> Router {
    let (routes, doc) = api().split_for_parts();
    let timeout = state.config.request_timeout;
    // Swagger UI's assets are vendored into the binary: no download at build, no CDN at run time.
    routes
        .merge(utoipa_swagger_ui::SwaggerUi::new("/docs").url("/openapi.json", doc))
        .merge(ui::router())
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .with_state(state)
        .layer(
            tower::ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(
                    move |_: tower::BoxError| async move { ApiError::Timeout(timeout) },
                ))
                .timeout(timeout),
        )
        // A bug must cost the client a 500 with the error envelope, never a dropped connection.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                axum::response::IntoResponse::into_response(ApiError::Internal(
                    "a request handler panicked".into(),
                ))
            },
        ))
        .layer(TraceLayer::new_for_http())
}
