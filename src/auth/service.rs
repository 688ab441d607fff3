//! What the web layer asks of tokens and sessions: a bearer token checked, a dashboard session
//! opened, found and closed, tokens listed and revoked. The SQL is the store's.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::store;
pub use super::store::{Rejected, TokenRow};
use crate::domain::access::{Actor, Principal};

/// The principal a bearer token stands for, if it is valid now.
pub async fn authenticate(
    pool: &PgPool,
    token: &str,
    now: DateTime<Utc>,
) -> Result<Result<Principal, Rejected>, sqlx::Error> {
    store::authenticate(pool, token, now).await
}

/// Opens a dashboard session for a token, known by the hash of its cookie.
pub async fn create_session(
    pool: &PgPool,
    hash: &[u8; 32],
    token_id: i64,
    expires_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    store::create_session(pool, hash, token_id, expires_at).await
}

/// The principal of a live session, if its token is still valid now.
pub async fn session(
    pool: &PgPool,
    hash: &[u8; 32],
    now: DateTime<Utc>,
) -> Result<Option<Principal>, sqlx::Error> {
    store::session(pool, hash, now).await
}

/// Closes a session (signing out).
pub async fn delete_session(pool: &PgPool, hash: &[u8; 32]) -> Result<(), sqlx::Error> {
    store::delete_session(pool, hash).await
}

/// Every token, or only `only`, by id; secrets are never stored, so never listed.
pub async fn list(pool: &PgPool, only: Option<i64>) -> Result<Vec<TokenRow>, sqlx::Error> {
    store::list(pool, only).await
}

/// Revokes a token (audited); false when there is no such token.
pub async fn revoke(pool: &PgPool, id: i64, actor: &Actor) -> Result<bool, sqlx::Error> {
    store::revoke(pool, id, actor).await
}
