//! The web dashboard under `/ui/`: server-rendered HTML and SVG, no script, every asset in the
//! binary. A page shows what the API would show the same token: sign-in opens a session for an API
//! token, and every page acts with that token's role (a team lead sees their own team only). One
//! module per page; `layout` holds what they share. This module only routes.

mod charts;
mod exports;
mod fleet;
mod format;
mod handovers;
mod invoices;
mod layout;
mod over_time;
mod plan;
mod savings;
mod signin;
mod team;
mod tokens;
mod unit_costs;
mod workloads;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::http::state::AppState;

const CSS: &str = include_str!("app.css");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(signin::home))
        .route("/ui/signin", get(signin::signin_page).post(signin::signin))
        .route("/ui/signout", post(signin::signout))
        .route("/ui/assets/app.css", get(css))
        .route("/ui/fleet", get(fleet::fleet))
        .route("/ui/team/{team}", get(team::team))
        .route("/ui/team/{team}/workloads.csv", get(team::workloads_csv))
        .route("/ui/plan", get(plan::plan_page))
        .route("/ui/plan/mig-parted.yaml", get(plan::mig_parted))
        .route("/ui/invoices/run", post(invoices::run_invoices))
        .route(
            "/ui/invoices/issue",
            get(invoices::confirm_issue_period).post(invoices::issue_period),
        )
        .route(
            "/ui/invoices/{id}/issue",
            get(invoices::confirm_issue_invoice).post(invoices::issue_invoice),
        )
        .route("/ui/invoices/{id}", get(invoices::invoice))
        .route(
            "/ui/tokens",
            get(tokens::tokens_page).post(tokens::create_token),
        )
        .route("/ui/tokens/{id}/revoke", post(tokens::revoke_token))
        .route("/ui/exports/focus", get(exports::focus_export))
        .route("/ui/exports/erp", get(exports::erp_export))
        .route("/ui/gpus/{uuid}/ledger", get(exports::gpu_ledger))
        .layer(axum::middleware::map_response(security_headers))
}

/// Pages load nothing but themselves and their stylesheet; no script runs at all.
async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not no-referrer: with it browsers send `Origin: null` on form posts, which same_origin refuses.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        CSS,
    )
}
