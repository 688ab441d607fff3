//! The bearer-token extractor: every handler that takes a [`Principal`] needs a valid token.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use chrono::Utc;

use super::error::ApiError;
use super::state::AppState;
use crate::auth::store as tokens;
use crate::domain::access::{Principal, Role};
use crate::domain::team::TeamId;

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let value = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| {
                ApiError::unauthorized(
                    "this endpoint needs a token: send Authorization: Bearer <token>",
                )
            })?
            .to_str()
            .map_err(|_| ApiError::unauthorized("the Authorization header is not text"))?;
        // The scheme is case-insensitive (RFC 7235 section 2.1): `BEARER` is `Bearer`.
        let token = value
            .trim_start()
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| {
                ApiError::unauthorized("the Authorization header must be Bearer <token>")
            })?;
        match tokens::authenticate(&state.pool, token, Utc::now()).await? {
            Ok(principal) => Ok(principal),
            Err(why) => {
                tracing::info!(?why, "A request presented an invalid token.");
                Err(ApiError::unauthorized(
                    "the token is invalid, revoked or expired",
                ))
            }
        }
    }
}

/// The team a request is about: a team lead's own (another team named is refused, not silently
/// narrowed), or the one asked for, if any. `what` names the data in the refusal.
pub fn team_in_scope(
    principal: &Principal,
    asked: Option<TeamId>,
    what: &str,
) -> Result<Option<TeamId>, ApiError> {
    match (principal.team_scope(), asked) {
        (Some(own), Some(asked)) if *own != asked => Err(ApiError::forbidden(format!(
            "a team lead of {own} sees their own team's {what} only"
        ))),
        (Some(own), _) => Ok(Some(own.clone())),
        (None, asked) => Ok(asked),
    }
}

/// Refuses callers whose role is not among `roles`.
pub fn require(principal: &Principal, roles: &[Role]) -> Result<(), ApiError> {
    if roles.contains(&principal.role()) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "a {} token may not use this endpoint; it needs the role {}",
            principal.role(),
            roles
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(" or ")
        )))
    }
}
