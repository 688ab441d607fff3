//! API tokens, stored by the hash of their secret, never by the secret itself; and the dashboard's
//! sign-in sessions, each acting with one token.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{NewToken, PresentedToken};
use crate::audit::{AuditAction, store as audit};
use crate::domain::access::{Actor, Principal, Role};
use crate::domain::team::TeamId;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("a team_lead token needs --team, and only a team_lead token takes one")]
    TeamRequired,
    #[error("a collector token needs --node, and only a collector token takes one")]
    NodeRequired,
    #[error("there is no team {0:?}: create it first (PUT /v1/teams/{0})")]
    UnknownTeam(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Creates a token and returns the bearer string, which is shown once and stored nowhere.
pub async fn create(
    pool: &PgPool,
    role: Role,
    team: Option<&TeamId>,
    node: Option<&str>,
    label: Option<&str>,
    expires_at: Option<DateTime<Utc>>,
    actor: &Actor,
) -> Result<(i64, String), TokenError> {
    if (role == Role::TeamLead) != team.is_some() {
        return Err(TokenError::TeamRequired);
    }
    if (role == Role::Collector) != node.is_some() {
        return Err(TokenError::NodeRequired);
    }
    if let Some(team) = team {
        let exists = sqlx::query_scalar!(
            r#"select exists(select 1 from team where team_id = $1) as "exists!""#,
            team.as_str()
        )
        .fetch_one(pool)
        .await?;
        if !exists {
            return Err(TokenError::UnknownTeam(team.to_string()));
        }
    }
    let new = NewToken::generate();
    let mut tx = pool.begin().await?;
    let id = sqlx::query_scalar!(
        "insert into api_token (role, team_id, node, secret_hash, label, expires_at)
         values ($1, $2, $3, $4, $5, $6) returning api_token_id",
        role.as_str(),
        team.map(TeamId::as_str),
        node,
        &new.hash()[..],
        label,
        expires_at
    )
    .fetch_one(&mut *tx)
    .await?;
    // The secret is never recorded, only what the token may do.
    audit::record(
        &mut tx,
        actor,
        AuditAction::TokenCreate,
        &id.to_string(),
        serde_json::json!({"role": role.as_str(), "team": team.map(TeamId::as_str), "node": node,
                           "label": label, "expires_at": expires_at}),
    )
    .await?;
    tx.commit().await?;
    Ok((id, new.token(id)))
}

/// Why a presented token does not authenticate; the API says only "invalid token" to the caller.
#[derive(Debug, PartialEq, Eq)]
pub enum Rejected {
    Malformed,
    Unknown,
    Revoked,
    Expired,
}

/// The principal a bearer token stands for, if it is valid now.
pub async fn authenticate(
    pool: &PgPool,
    token: &str,
    now: DateTime<Utc>,
) -> Result<Result<Principal, Rejected>, sqlx::Error> {
    let Some(presented) = PresentedToken::parse(token) else {
        return Ok(Err(Rejected::Malformed));
    };
    let Some(row) = sqlx::query!(
        r#"select role, team_id as "team_id: TeamId", node, secret_hash, expires_at, revoked_at
           from api_token where api_token_id = $1"#,
        presented.id
    )
    .fetch_optional(pool)
    .await?
    else {
        return Ok(Err(Rejected::Unknown));
    };
    if !presented.matches(&row.secret_hash) {
        return Ok(Err(Rejected::Unknown));
    }
    if row.revoked_at.is_some() {
        return Ok(Err(Rejected::Revoked));
    }
    if row.expires_at.is_some_and(|e| e <= now) {
        return Ok(Err(Rejected::Expired));
    }
    Ok(Ok(principal(
        presented.id,
        &row.role,
        row.team_id,
        row.node,
    )?))
}

/// A stored token's principal; a row that does not make one is a decode error.
fn principal(
    token_id: i64,
    role: &str,
    team: Option<TeamId>,
    node: Option<String>,
) -> Result<Principal, sqlx::Error> {
    let role: Role = role
        .parse()
        .map_err(|e: String| sqlx::Error::Decode(e.into()))?;
    Principal::of(token_id, role, team, node).map_err(|e| sqlx::Error::Decode(e.into()))
}

/// Revokes a token; returns whether it existed and was not revoked already.
pub async fn revoke(pool: &PgPool, id: i64, actor: &Actor) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let done = sqlx::query!(
        "update api_token set revoked_at = now() where api_token_id = $1 and revoked_at is null",
        id
    )
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 1 {
        audit::record(
            &mut tx,
            actor,
            AuditAction::TokenRevoke,
            &id.to_string(),
            serde_json::json!({}),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(done.rows_affected() == 1)
}

#[derive(Debug)]
pub struct TokenRow {
    pub id: i64,
    pub role: String,
    pub team_id: Option<TeamId>,
    pub node: Option<String>,
    pub label: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Every token (or the one with id `only`), oldest first; never a secret.
pub async fn list(pool: &PgPool, only: Option<i64>) -> Result<Vec<TokenRow>, sqlx::Error> {
    sqlx::query_as!(
        TokenRow,
        r#"select api_token_id as id, role, team_id as "team_id: TeamId", node, label, created_at,
                  expires_at, revoked_at
           from api_token where $1::int8 is null or api_token_id = $1 order by api_token_id"#,
        only
    )
    .fetch_all(pool)
    .await
}

/// Opens a session for an API token until `expires_at`.
pub async fn create_session(
    pool: &PgPool,
    hash: &[u8; 32],
    token_id: i64,
    expires_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into ui_session (session_hash, api_token_id, expires_at) values ($1, $2, $3)",
        &hash[..],
        token_id,
        expires_at
    )
    .execute(pool)
    .await?;
    // Sign-ins are rare: a good moment to forget expired sessions.
    sqlx::query!("delete from ui_session where expires_at < now() - interval '1 day'")
        .execute(pool)
        .await?;
    Ok(())
}

/// The principal of an unexpired session whose token is neither revoked nor expired.
pub async fn session(
    pool: &PgPool,
    hash: &[u8; 32],
    now: DateTime<Utc>,
) -> Result<Option<Principal>, sqlx::Error> {
    let Some(t) = sqlx::query!(
        r#"select t.api_token_id as token_id, t.role, t.team_id as "team_id: TeamId", t.node
           from ui_session s join api_token t using (api_token_id)
           where s.session_hash = $1 and s.expires_at > $2
             and t.revoked_at is null and (t.expires_at is null or t.expires_at > $2)"#,
        &hash[..],
        now
    )
    .fetch_optional(pool)
    .await?
    else {
        return Ok(None);
    };
    principal(t.token_id, &t.role, t.team_id, t.node).map(Some)
}

pub async fn delete_session(pool: &PgPool, hash: &[u8; 32]) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ui_session where session_hash = $1", &hash[..])
        .execute(pool)
        .await?;
    Ok(())
}
