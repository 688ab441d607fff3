//! `GET/POST /v1/rate-cards`: effective-dated price versions (finance, admin).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use super::teams::ApiJson;
use crate::billing::rate_card::store as rate_cards;
use crate::billing::rate_card::{IdlePolicy, IsolationFactors, RateCard, RateCardInput};
use crate::billing::service as billing;
use crate::domain::access::Actor;
use crate::domain::access::{Principal, Role};
use crate::domain::slice::ShareWeights;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_rate_cards, create_rate_card))
        .routes(routes!(withdraw_rate_card))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RateCardView {
    /// The version number.
    pub version: i64,
    pub effective_from: DateTime<Utc>,
    /// When the next version takes over; null for the latest.
    pub effective_until: Option<DateTime<Utc>>,
    pub currency: String,
    pub weights: ShareWeights,
    pub isolation_factors: IsolationFactors,
    pub idle_policy: IdlePolicy,
    #[schema(value_type = String, example = "3.00")]
    pub default_hourly_cost: Decimal,
    #[schema(value_type = BTreeMap<String, String>)]
    pub prices: BTreeMap<String, Decimal>,
    pub note: Option<String>,
}

fn view(card: &RateCard, until: Option<DateTime<Utc>>) -> RateCardView {
    RateCardView {
        version: card.id,
        effective_from: card.effective_from,
        effective_until: until,
        currency: card.currency.code.clone(),
        weights: card.weights,
        isolation_factors: card.factors,
        idle_policy: card.idle_policy,
        default_hourly_cost: card.default_hourly_cost,
        prices: card.prices.clone(),
        note: card.note.clone(),
    }
}

/// Every rate card version, oldest first.
#[utoipa::path(get, path = "/v1/rate-cards", tag = "billing",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the versions", body = Vec<RateCardView>),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs finance, admin or importer (a back-fill's dry run prices with them)", body = ErrorBody)))]
async fn list_rate_cards(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Vec<RateCardView>>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::Importer])?;
    let cards: Vec<RateCard> = rate_cards::rate_cards(&state.pool)
        .await?
        .into_values()
        .collect();
    let mut sorted = cards;
    sorted.sort_by_key(|c| c.effective_from);
    let views = sorted
        .iter()
        .enumerate()
        .map(|(i, c)| view(c, sorted.get(i + 1).map(|n| n.effective_from)))
        .collect();
    Ok(Json(views))
}

/// Publishes a new version. It applies from `effective_from` (an hour boundary) until a later version;
/// published versions are never edited.
#[utoipa::path(post, path = "/v1/rate-cards", tag = "billing",
    request_body = RateCardInput,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "published", body = RateCardView),
        (status = 400, description = "invalid fields, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs finance or admin", body = ErrorBody),
        (status = 409, description = "not later than the latest version, inside an issued period, or another currency", body = ErrorBody)))]
async fn create_rate_card(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(input): ApiJson<RateCardInput>,
) -> Result<(StatusCode, Json<RateCardView>), ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let mut card = input
        .validate(Utc::now())
        .map_err(|fields| ApiError::invalid_fields("the rate card is invalid", fields))?;
    card.id = billing::publish_rate_card(&state.pool, &card, &Actor::of(&principal)).await?;
    tracing::info!(version = card.id, from = %card.effective_from, by = principal.token_id(), "A rate card version was published.");
    Ok((StatusCode::CREATED, Json(view(&card, None))))
}

/// Withdraws a version that is not in force yet and prices no invoice line (a mistyped date or
/// price); audited as `rate_card.withdraw`. A version in force is never withdrawn: publish a new one.
#[utoipa::path(delete, path = "/v1/rate-cards/{version}", tag = "billing",
    params(("version" = i64, Path, description = "the version number")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "withdrawn"),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs finance or admin", body = ErrorBody),
        (status = 404, description = "no such version", body = ErrorBody),
        (status = 409, description = "in force, or priced invoice lines", body = ErrorBody)))]
async fn withdraw_rate_card(
    State(state): State<AppState>,
    principal: Principal,
    axum::extract::Path(version): axum::extract::Path<String>,
) -> Result<StatusCode, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let id: i64 = version
        .parse()
        .map_err(|_| ApiError::not_found(format!("there is no rate card version {version}")))?;
    let card =
        billing::withdraw_rate_card(&state.pool, id, Utc::now(), &Actor::of(&principal)).await?;
    tracing::info!(version = id, from = %card.effective_from, by = principal.token_id(), "A rate card version not yet in force was withdrawn.");
    Ok(StatusCode::NO_CONTENT)
}
