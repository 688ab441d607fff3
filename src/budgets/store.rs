//! The `budget` table's statements, run inside `budgets`' transactions.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;

use super::period::BudgetPeriod;
use crate::domain::team::TeamId;

/// A budget as stored; its team and period are parsed where the row is read (one that does not
/// parse is an error, never a default).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BudgetRow {
    pub budget_id: i64,
    #[sqlx(try_from = "String")]
    pub team_id: TeamId,
    /// `""`, `namespace:<ns>` or `label:<key>=<value>` (`domain::scope`).
    pub scope: String,
    #[sqlx(try_from = "String")]
    pub period: BudgetPeriod,
    pub amount: Option<Decimal>,
    pub auto_months: Option<i16>,
    pub currency: String,
    pub thresholds: sqlx::types::Json<serde_json::Value>,
    pub channels: sqlx::types::Json<serde_json::Value>,
    pub idle_days: Option<i16>,
    pub spend_change: Option<Decimal>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A budget's columns as written.
#[derive(Debug, Clone)]
pub struct Columns {
    pub scope: String,
    pub period: BudgetPeriod,
    pub amount: Option<Decimal>,
    pub auto_months: Option<i16>,
    pub currency: String,
    pub thresholds: serde_json::Value,
    pub channels: serde_json::Value,
    pub idle_days: Option<i16>,
    pub spend_change: Option<Decimal>,
}

/// Every budget (`team`'s only, when given), by team.
pub async fn list(
    conn: &mut PgConnection,
    team: Option<&TeamId>,
) -> Result<Vec<BudgetRow>, sqlx::Error> {
    sqlx::query_as(
        "select * from budget where $1::text is null or team_id = $1
         order by team_id, scope, period",
    )
    .bind(team.map(TeamId::as_str))
    .fetch_all(conn)
    .await
}

/// The budget `id`, locked until the transaction ends when `lock`.
pub async fn get(
    conn: &mut PgConnection,
    id: i64,
    lock: bool,
) -> Result<Option<BudgetRow>, sqlx::Error> {
    let sql = if lock {
        "select * from budget where budget_id = $1 for update"
    } else {
        "select * from budget where budget_id = $1"
    };
    sqlx::query_as(sql).bind(id).fetch_optional(conn).await
}

/// The namespaces `team` owns now, by name.
pub async fn namespaces(
    conn: &mut PgConnection,
    team: &TeamId,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select namespace from team_namespace_now where team_id = $1 order by namespace",
    )
    .bind(team.as_str())
    .fetch_all(conn)
    .await
}

/// Whether `team` exists.
pub async fn team_exists(conn: &mut PgConnection, team: &TeamId) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select exists (select 1 from team where team_id = $1)")
        .bind(team.as_str())
        .fetch_one(conn)
        .await
}

/// Inserts a budget; `None` if the team has one already.
pub async fn insert(
    conn: &mut PgConnection,
    team: &TeamId,
    c: &Columns,
) -> Result<Option<BudgetRow>, sqlx::Error> {
    sqlx::query_as(
        "insert into budget (team_id, amount, auto_months, currency, thresholds, channels,
                             idle_days, spend_change, scope, period)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         on conflict (team_id, scope, period) do nothing
         returning *",
    )
    .bind(team.as_str())
    .bind(c.amount)
    .bind(c.auto_months)
    .bind(&c.currency)
    .bind(sqlx::types::Json(&c.thresholds))
    .bind(sqlx::types::Json(&c.channels))
    .bind(c.idle_days)
    .bind(c.spend_change)
    .bind(&c.scope)
    .bind(c.period.as_str())
    .fetch_optional(conn)
    .await
}

pub async fn update(
    conn: &mut PgConnection,
    id: i64,
    c: &Columns,
) -> Result<BudgetRow, sqlx::Error> {
    sqlx::query_as(
        "update budget set amount = $2, auto_months = $3, currency = $4, thresholds = $5,
                           channels = $6, idle_days = $7, spend_change = $8, updated_at = now()
         where budget_id = $1
         returning *",
    )
    .bind(id)
    .bind(c.amount)
    .bind(c.auto_months)
    .bind(&c.currency)
    .bind(sqlx::types::Json(&c.thresholds))
    .bind(sqlx::types::Json(&c.channels))
    .bind(c.idle_days)
    .bind(c.spend_change)
    .fetch_one(conn)
    .await
}

pub async fn delete(conn: &mut PgConnection, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("delete from budget where budget_id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}
