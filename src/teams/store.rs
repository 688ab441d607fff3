//! The `team`, `team_namespace` and consumers' `team_id` statements, run inside `teams`'
//! transactions.

use sqlx::{PgConnection, PgPool};

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

/// The first of `namespaces` another team owns, and that team.
pub async fn namespace_owner(
    conn: &mut PgConnection,
    team: &TeamId,
    namespaces: &[String],
) -> Result<Option<(String, String)>, sqlx::Error> {
    Ok(sqlx::query!(
        "select namespace, team_id from team_namespace
         where namespace = any($1) and team_id <> $2 order by namespace limit 1",
        namespaces,
        team.as_str()
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|t| (t.namespace, t.team_id)))
}

/// A team's fields as they stand.
pub struct TeamFields {
    pub display_name: String,
    pub cost_center: Option<String>,
    pub gl_account: Option<String>,
}

/// Locks the team's row until the transaction ends and reads it; `None` for a new team.
pub async fn lock(
    conn: &mut PgConnection,
    team: &TeamId,
) -> Result<Option<TeamFields>, sqlx::Error> {
    sqlx::query_as!(
        TeamFields,
        "select display_name, cost_center, gl_account from team where team_id = $1 for update",
        team.as_str()
    )
    .fetch_optional(&mut *conn)
    .await
}

pub async fn upsert(
    conn: &mut PgConnection,
    team: &TeamId,
    name: &str,
    cost_center: Option<&str>,
    gl_account: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "insert into team (team_id, display_name, cost_center, gl_account) values ($1, $2, $3, $4)
         on conflict (team_id) do update set display_name = excluded.display_name,
             cost_center = excluded.cost_center, gl_account = excluded.gl_account, updated_at = now()",
        team.as_str(),
        name,
        cost_center,
        gl_account
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Makes `namespaces` the team's list; returns those it lost.
pub async fn replace_namespaces(
    conn: &mut PgConnection,
    team: &TeamId,
    namespaces: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    let removed = sqlx::query_scalar!(
        "delete from team_namespace where team_id = $1 and not (namespace = any($2)) returning namespace",
        team.as_str(),
        namespaces
    )
    .fetch_all(&mut *conn)
    .await?;
    // No `on conflict`: a namespace another team claimed meanwhile is a key violation.
    sqlx::query!(
        "insert into team_namespace (namespace, team_id)
         select n, $2 from unnest($1::text[]) n
         where not exists (select 1 from team_namespace t where t.namespace = n and t.team_id = $2)",
        namespaces,
        team.as_str()
    )
    .execute(&mut *conn)
    .await?;
    Ok(removed)
}

/// Gives the team the unlabelled consumers of `gained` and hands those of `lost` back to
/// `unattributed`, their days in the team's day rollup with them; returns how many changed team.
pub async fn reattribute(
    conn: &mut PgConnection,
    team: &TeamId,
    gained: &[String],
    lost: &[String],
) -> Result<u64, sqlx::Error> {
    // Ingest adds to the team's day rollup under the team it reads in the same statement, once it
    // holds the table: holding it here first, until the transaction ends, makes ingest wait for
    // the move instead of adding to the team the consumers just left.
    sqlx::query!("lock table usage_team_daily in share row exclusive mode")
        .execute(&mut *conn)
        .await?;
    let to_team = sqlx::query!(
        r#"update consumer c set team_id = $2
           from consumer was
           where was.consumer_id = c.consumer_id
             and c.team_label is null and c.namespace = any($1) and c.team_id <> $2
           returning c.consumer_id as "consumer_id!", was.team_id as "from_team!""#,
        gained,
        team.as_str()
    )
    .fetch_all(&mut *conn)
    .await?;
    let to_unattributed = sqlx::query_scalar!(
        "update consumer set team_id = 'unattributed'
         where team_label is null and namespace = any($1) and team_id = $2
         returning consumer_id",
        lost,
        team.as_str()
    )
    .fetch_all(&mut *conn)
    .await?;
    let (mut consumers, mut from_teams): (Vec<i64>, Vec<String>) = to_team
        .into_iter()
        .map(|r| (r.consumer_id, r.from_team))
        .unzip();
    let moved = (consumers.len() + to_unattributed.len()) as u64;
    from_teams.extend(to_unattributed.iter().map(|_| team.as_str().to_owned()));
    consumers.extend(to_unattributed);
    if !consumers.is_empty() {
        sqlx::query!(
            "select move_consumers_days($1, $2)",
            &consumers,
            &from_teams
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(moved)
}
