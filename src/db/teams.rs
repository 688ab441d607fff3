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

pub struct TeamUpdate<'a> {
    pub team: &'a TeamId,
    pub display_name: &'a str,
    pub cost_center: Option<&'a str>,
    pub gl_account: Option<&'a str>,
    pub namespaces: &'a [String],
}

#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    #[error("namespace {namespace:?} belongs to team {owner:?}; remove it there first")]
    NamespaceTaken { namespace: String, owner: String },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Creates or replaces a team and its namespace list, then re-attributes the unlabelled consumers of
/// the namespaces it gained or lost. Returns the team and how many consumers changed team.
pub async fn put(
    pool: &PgPool,
    u: TeamUpdate<'_>,
    actor: &Actor,
) -> Result<(TeamRow, u64), TeamError> {
    let mut tx = pool.begin().await?;
    if let Some(taken) = sqlx::query!(
        "select namespace, team_id from team_namespace
         where namespace = any($1) and team_id <> $2 order by namespace limit 1",
        u.namespaces,
        u.team.as_str()
    )
    .fetch_optional(&mut *tx)
    .await?
    {
        return Err(TeamError::NamespaceTaken {
            namespace: taken.namespace,
            owner: taken.team_id,
        });
    }
    sqlx::query!(
        "insert into team (team_id, display_name, cost_center, gl_account) values ($1, $2, $3, $4)
         on conflict (team_id) do update set display_name = excluded.display_name,
             cost_center = excluded.cost_center, gl_account = excluded.gl_account, updated_at = now()",
        u.team.as_str(),
        u.display_name,
        u.cost_center,
        u.gl_account
    )
    .execute(&mut *tx)
    .await?;
    let removed = sqlx::query_scalar!(
        "delete from team_namespace where team_id = $1 and not (namespace = any($2)) returning namespace",
        u.team.as_str(),
        u.namespaces
    )
    .fetch_all(&mut *tx)
    .await?;
    sqlx::query!(
        "insert into team_namespace (namespace, team_id) select n, $2 from unnest($1::text[]) n
         on conflict (namespace) do nothing",
        u.namespaces,
        u.team.as_str()
    )
    .execute(&mut *tx)
    .await?;
    let gained = sqlx::query!(
        "update consumer set team_id = $2
         where team_label is null and namespace = any($1) and team_id <> $2",
        u.namespaces,
        u.team.as_str()
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let lost = sqlx::query!(
        "update consumer set team_id = 'unattributed'
         where team_label is null and namespace = any($1) and team_id = $2",
        &removed,
        u.team.as_str()
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    audit::record(
        &mut tx,
        actor,
        "team.put",
        u.team.as_str(),
        serde_json::json!({
            "display_name": u.display_name, "cost_center": u.cost_center, "gl_account": u.gl_account,
            "namespaces": u.namespaces, "namespaces_removed": removed, "reattributed_consumers": gained + lost,
        }),
    )
    .await?;
    tx.commit().await?;
    let row = list(pool, Some(u.team))
        .await?
        .pop()
        .expect("the team was just written");
    Ok((row, gained + lost))
}
