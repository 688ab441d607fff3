//! Teams and the namespaces they own. Putting a team re-attributes the unlabelled consumers of the
//! namespaces it gained or lost, in the transaction that changes it; a namespace belongs to one team
//! whatever the race (the database's key decides, and the loser is told who owns it).

pub mod store;

use sqlx::PgPool;

use crate::audit::{AuditAction, store as audit};
use crate::domain::access::Actor;
use crate::domain::team::TeamId;
use store::TeamRow;

/// A change to a team: `None` leaves a field as it is (for a new team: its id as display name, no
/// cost center, GL account or namespaces); `Some(None)` clears an optional field.
#[derive(Debug, Clone, Copy, Default)]
pub struct TeamUpdate<'a> {
    pub display_name: Option<&'a str>,
    pub cost_center: Option<Option<&'a str>>,
    pub gl_account: Option<Option<&'a str>>,
    /// Replaces the namespace list.
    pub namespaces: Option<&'a [String]>,
}

#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    #[error("namespace {namespace:?} belongs to team {owner:?}; remove it there first")]
    NamespaceTaken { namespace: String, owner: String },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Creates or changes a team (only the fields `u` gives), then re-attributes the unlabelled
/// consumers of the namespaces it gained or lost. Returns the team and how many consumers changed
/// team.
pub async fn put(
    pool: &PgPool,
    team: &TeamId,
    u: TeamUpdate<'_>,
    actor: &Actor,
) -> Result<(TeamRow, u64), TeamError> {
    match put_once(pool, team, u, actor).await {
        Err(TeamError::Db(sqlx::Error::Database(e)))
            if e.code().as_deref() == Some("23505")
                && e.constraint() == Some("team_namespace_pkey") =>
        {
            let mut conn = pool.acquire().await?;
            let namespaces = u.namespaces.unwrap_or_default();
            Err(taken(&mut conn, team, namespaces)
                .await?
                .unwrap_or(TeamError::NamespaceTaken {
                    namespace: namespaces.join(", "),
                    owner: "another team, at the same moment".into(),
                }))
        }
        other => other,
    }
}

/// The first of `namespaces` another team owns, as the error to answer with.
async fn taken(
    conn: &mut sqlx::PgConnection,
    team: &TeamId,
    namespaces: &[String],
) -> Result<Option<TeamError>, sqlx::Error> {
    Ok(store::namespace_owner(conn, team, namespaces)
        .await?
        .map(|(namespace, owner)| TeamError::NamespaceTaken { namespace, owner }))
}

async fn put_once(
    pool: &PgPool,
    team: &TeamId,
    u: TeamUpdate<'_>,
    actor: &Actor,
) -> Result<(TeamRow, u64), TeamError> {
    let mut tx = pool.begin().await?;
    if let Some(namespaces) = u.namespaces
        && let Some(e) = taken(&mut tx, team, namespaces).await?
    {
        return Err(e);
    }
    let current = store::lock(&mut tx, team).await?;
    let (name, cost_center, gl_account) = match &current {
        Some(c) => (
            u.display_name.unwrap_or(&c.display_name),
            u.cost_center.unwrap_or(c.cost_center.as_deref()),
            u.gl_account.unwrap_or(c.gl_account.as_deref()),
        ),
        None => (
            u.display_name.unwrap_or(team.as_str()),
            u.cost_center.flatten(),
            u.gl_account.flatten(),
        ),
    };
    store::upsert(&mut tx, team, name, cost_center, gl_account).await?;
    let (mut removed, mut moved) = (Vec::new(), 0);
    if let Some(namespaces) = u.namespaces {
        removed = store::replace_namespaces(&mut tx, team, namespaces).await?;
        moved = store::reattribute(&mut tx, team, namespaces, &removed).await?;
    }
    audit::record(
        &mut tx,
        actor,
        AuditAction::TeamPut,
        team.as_str(),
        serde_json::json!({
            "display_name": name, "cost_center": cost_center, "gl_account": gl_account,
            "namespaces": u.namespaces, "namespaces_removed": removed, "reattributed_consumers": moved,
        }),
    )
    .await?;
    tx.commit().await?;
    let row = store::list(pool, Some(team))
        .await?
        .pop()
        .ok_or(sqlx::Error::RowNotFound)?;
    Ok((row, moved))
}
