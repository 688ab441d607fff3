//! The HTTP API (DESIGN.md, "HTTP API"): one router per resource, each route registered with its
//! OpenAPI annotation through `utoipa-axum` so that a route and its documentation cannot drift; the
//! dashboard (`ui`); and the server that runs them (`server`). This module only assembles them.

mod abandoned;
mod alerts;
mod audit;
pub mod auth;
pub(crate) mod budgets;
pub mod error;
mod exports;
mod fleet;
mod health;
mod ingest;
mod invoices;
pub(crate) mod ledger;
pub mod limits;
mod opencost;
pub(crate) mod plans;
mod rate_cards;
mod reports;
pub mod server;
pub mod state;
mod teams;
mod tokens;
mod ui;
mod units;

use axum::Router;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

use error::ApiError;
use state::AppState;

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
        .merge(budgets::router())
        .merge(alerts::router())
        .merge(exports::router())
        .merge(audit::router())
        .merge(teams::router())
        .merge(tokens::router())
        .merge(fleet::router())
        .merge(ledger::router())
        .merge(plans::router())
        .merge(units::router())
        .merge(opencost::router())
        .merge(health::router())
}

/// The OpenAPI document the code describes (`slicemeter openapi`, `GET /openapi.json`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes_and_document().1
}

fn routes_and_document() -> (axum::Router<AppState>, utoipa::openapi::OpenApi) {
    let (routes, mut doc) = api().split_for_parts();
    error::describe_codes(&mut doc);
    (routes, doc)
}

/// The whole application: API, operations endpoints and the OpenAPI document.
pub fn router(state: AppState) -> Router {
    ingest::register_metrics();
    let (routes, doc) = routes_and_document();
    let timeout = state.config.request_timeout;
    // Swagger UI's assets are vendored into the binary: no download at build, no CDN at run time.
    routes
        .merge(utoipa_swagger_ui::SwaggerUi::new("/docs").url("/openapi.json", doc))
        .merge(ui::router())
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .with_state(state)
        // Inside the timeout, so that a request it cuts off counts as abandoned too.
        .layer(abandoned::WatchLayer)
        .layer(
            tower::ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(
                    move |_: tower::BoxError| async move { ApiError::timeout(timeout) },
                ))
                .timeout(timeout),
        )
        // A bug must cost the client a 500 with the error envelope, never a dropped connection.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                axum::response::IntoResponse::into_response(ApiError::internal(
                    "a request handler panicked",
                ))
            },
        ))
        // Pages, reports and CSV gzip'd for a client that asks (the fleet page shrinks about 10x);
        // streamed bodies stay streamed, a chunk at a time.
        .layer(tower_http::compression::CompressionLayer::new().gzip(true))
        .layer(TraceLayer::new_for_http())
}
