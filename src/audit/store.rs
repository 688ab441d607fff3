//! The audit log's rows: written inside the transaction of the change they record, read newest first.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use utoipa::ToSchema;

use super::AuditAction;
use crate::domain::access::Actor;

pub async fn record(
    conn: &mut PgConnection,
    actor: &Actor,
    action: AuditAction,
    subject: &str,
    details: serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into audit_log (actor_token_id, actor_role, action, subject, details)
         values ($1, $2, $3, $4, $5)",
        actor.token_id,
        actor.role,
        action.as_str(),
        subject,
        details
    )
    .execute(conn)
    .await?;
    Ok(())
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The API token that acted; null for the command line.
    pub actor_token_id: Option<i64>,
    /// `admin`, `finance`, `team_lead`, `collector` or `cli`.
    pub actor_role: String,
    /// e.g. `invoice.issue`.
    pub action: String,
    /// What it acted on: an invoice number, a team, a rate card version, a token id.
    pub subject: String,
    pub details: serde_json::Value,
}

/// Entries in `[from, to)`, optionally of one action, newest first, at most `limit`.
pub async fn list(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    action: Option<AuditAction>,
    limit: i64,
) -> Result<Vec<AuditEntry>, sqlx::Error> {
    sqlx::query_as!(
        AuditEntry,
        r#"select audit_id as id, at, actor_token_id, actor_role, action, subject, details
           from audit_log
           where at >= $1 and at < $2 and ($3::text is null or action = $3)
           order by at desc, audit_id desc
           limit $4"#,
        from,
        to,
        action.map(AuditAction::as_str),
        limit
    )
    .fetch_all(pool)
    .await
}
