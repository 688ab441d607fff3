//! Teams, their namespaces, and re-attribution of the consumers those namespaces hold.

use sqlx::PgPool;

use crate::db::audit::{self, Actor};
use crate::domain::team::TeamId;

#[derive(Debug, Clone)]
pub struct TeamRow {
    pub team_id: String,
    pub display_name: String,
    pub cost_center: Option<String>,
    pub gl_account: Option<String>,
    pub namespaces: Vec<String>,
}

pub async fn list(pool: &PgPool, only: Option<&TeamId>) -> Result<Vec<TeamRow>, sqlx::Error> {
    sqlx::query_as!(
        TeamRow,
        r#"select t.team_id, t.display_name, t.cost_center, t.gl_account,
                  coalesce(array_agg(n.namespace order by n.namespace)
                           filter (where n.namespace is not null), '{}') as "namespaces!"
           from team t left join team_namespace n using (team_id)
           where $1::text is null or t.team_id = $1
           group by t.team_id
           order by t.team_id"#,
        only.map(TeamId::as_str)
    )
    .fetch_all(pool)
    .await
}

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

/// The first of `namespaces` another team owns, if any.
async fn taken(
    conn: &mut sqlx::PgConnection,
    team: &TeamId,
    namespaces: &[String],
) -> Result<Option<TeamError>, sqlx::Error> {
    Ok(sqlx::query!(
        "select namespace, team_id from team_namespace
         where namespace = any($1) and team_id <> $2 order by namespace limit 1",
        namespaces,
        team.as_str()
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|t| TeamError::NamespaceTaken {
        namespace: t.namespace,
        owner: t.team_id,
    }))
}

/// Creates or changes a team (only the fields `u` gives), then re-attributes the unlabelled
/// consumers of the namespaces it gained or lost. Returns the team and how many consumers changed
/// team. A namespace belongs to one team, whatever the race: the database's key decides, and the
/// loser is told who owns it.
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
    let current = sqlx::query!(
        "select display_name, cost_center, gl_account from team where team_id = $1 for update",
        team.as_str()
    )
    .fetch_optional(&mut *tx)
    .await?;
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
    sqlx::query!(
        "insert into team (team_id, display_name, cost_center, gl_account) values ($1, $2, $3, $4)
         on conflict (team_id) do update set display_name = excluded.display_name,
             cost_center = excluded.cost_center, gl_account = excluded.gl_account, updated_at = now()",
        team.as_str(),
        name,
        cost_center,
        gl_account
    )
    .execute(&mut *tx)
    .await?;
    let (mut removed, mut moved) = (Vec::new(), 0);
    if let Some(namespaces) = u.namespaces {
        removed = sqlx::query_scalar!(
            "delete from team_namespace where team_id = $1 and not (namespace = any($2)) returning namespace",
            team.as_str(),
            namespaces
        )
        .fetch_all(&mut *tx)
        .await?;
        // No `on conflict`: a namespace another team claimed meanwhile is a key violation.
        sqlx::query!(
            "insert into team_namespace (namespace, team_id)
             select n, $2 from unnest($1::text[]) n
             where not exists (select 1 from team_namespace t where t.namespace = n and t.team_id = $2)",
            namespaces,
            team.as_str()
        )
        .execute(&mut *tx)
        .await?;
        let gained = sqlx::query!(
            "update consumer set team_id = $2
             where team_label is null and namespace = any($1) and team_id <> $2",
            namespaces,
            team.as_str()
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let lost = sqlx::query!(
            "update consumer set team_id = 'unattributed'
             where team_label is null and namespace = any($1) and team_id = $2",
            &removed,
            team.as_str()
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        moved = gained + lost;
    }
    audit::record(
        &mut tx,
        actor,
        "team.put",
        team.as_str(),
        serde_json::json!({
            "display_name": name, "cost_center": cost_center, "gl_account": gl_account,
            "namespaces": u.namespaces, "namespaces_removed": removed, "reattributed_consumers": moved,
        }),
    )
    .await?;
    tx.commit().await?;
    let row = list(pool, Some(team))
        .await?
        .pop()
        .ok_or(sqlx::Error::RowNotFound)?;
    Ok((row, moved))
}
