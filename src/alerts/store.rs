//! The `alert` and `alert_delivery` tables' statements.

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::PgConnection;
use sqlx::types::Json;

use super::kind::{AlertKind, DeliveryState};
use crate::budgets::Channel;
use crate::domain::team::TeamId;
use crate::domain::time::Month;

/// An alert to fire: its key is what makes it once per period.
#[derive(Debug, Clone, PartialEq)]
pub struct Fire {
    pub budget_id: i64,
    pub team: TeamId,
    pub period: Month,
    pub kind: AlertKind,
    pub key: String,
    pub subject: String,
    pub details: serde_json::Value,
}

/// Records `fire` with a pending delivery to each of `channels`, unless it was fired before;
/// its id when it is new.
pub async fn fire(
    conn: &mut PgConnection,
    fire: &Fire,
    channels: &[Channel],
) -> Result<Option<i64>, sqlx::Error> {
    let id: Option<i64> = sqlx::query_scalar(
        "insert into alert (budget_id, team_id, period, kind, key, subject, details)
         values ($1, $2, $3, $4, $5, $6, $7)
         on conflict (budget_id, period, kind, key) do nothing
         returning alert_id",
    )
    .bind(fire.budget_id)
    .bind(fire.team.as_str())
    .bind(fire.period.first_day())
    .bind(fire.kind.as_str())
    .bind(&fire.key)
    .bind(&fire.subject)
    .bind(Json(&fire.details))
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(id) = id {
        let channels: Vec<Json<&Channel>> = channels.iter().map(Json).collect();
        sqlx::query(
            "insert into alert_delivery (alert_id, channel)
             select $1, c from unnest($2::jsonb[]) with ordinality as t(c, n) order by n",
        )
        .bind(id)
        .bind(channels)
        .execute(&mut *conn)
        .await?;
    }
    Ok(id)
}

/// Takes the transaction-long lock only one evaluation at a time holds, across servers; `false`
/// if another holds it.
pub async fn try_lock_evaluation(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select pg_try_advisory_xact_lock(hashtext('slicemeter.alerts'))")
        .fetch_one(conn)
        .await
}

/// An alert as stored; its team and kind are parsed where the row is read (one that does not
/// parse is an error).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AlertRow {
    pub alert_id: i64,
    pub budget_id: Option<i64>,
    #[sqlx(try_from = "String")]
    pub team_id: TeamId,
    /// The month it is about, as its first day.
    pub period: NaiveDate,
    #[sqlx(try_from = "String")]
    pub kind: AlertKind,
    pub key: String,
    pub subject: String,
    pub details: Json<serde_json::Value>,
    pub fired_at: DateTime<Utc>,
}

/// A delivery as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeliveryRow {
    pub delivery_id: i64,
    pub alert_id: i64,
    pub channel: Json<Channel>,
    #[sqlx(try_from = "String")]
    pub state: DeliveryState,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// The pending delivery due first with its alert, locked until the transaction ends; none that
/// another server holds.
pub async fn claim_due(
    conn: &mut PgConnection,
) -> Result<Option<(DeliveryRow, AlertRow)>, sqlx::Error> {
    let Some(d): Option<DeliveryRow> = sqlx::query_as(
        "select * from alert_delivery
         where state = 'pending' and next_attempt_at <= now()
         order by next_attempt_at, delivery_id
         limit 1
         for update skip locked",
    )
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(None);
    };
    let a: AlertRow = sqlx::query_as("select * from alert where alert_id = $1")
        .bind(d.alert_id)
        .fetch_one(&mut *conn)
        .await?;
    Ok(Some((d, a)))
}

/// Records a delivery's attempt: delivered, or failed with why and retried at `retry_at` (given
/// up when `None`).
pub async fn attempted(
    conn: &mut PgConnection,
    delivery_id: i64,
    outcome: Result<(), (&str, Option<DateTime<Utc>>)>,
) -> Result<(), sqlx::Error> {
    match outcome {
        Ok(()) => sqlx::query(
            "update alert_delivery set state = 'delivered', attempts = attempts + 1,
                    delivered_at = now(), last_error = null
             where delivery_id = $1",
        )
        .bind(delivery_id),
        Err((why, retry_at)) => sqlx::query(
            "update alert_delivery
             set attempts = attempts + 1, last_error = $2,
                 state = case when $3::timestamptz is null then 'failed' else 'pending' end,
                 next_attempt_at = coalesce($3, next_attempt_at)
             where delivery_id = $1",
        )
        .bind(delivery_id)
        .bind(why)
        .bind(retry_at),
    }
    .execute(conn)
    .await?;
    Ok(())
}

/// The latest `limit` alerts (`team`'s only, when given), newest first, with their deliveries.
pub async fn list(
    conn: &mut PgConnection,
    team: Option<&TeamId>,
    limit: i64,
) -> Result<Vec<(AlertRow, Vec<DeliveryRow>)>, sqlx::Error> {
    let alerts: Vec<AlertRow> = sqlx::query_as(
        "select * from alert where $1::text is null or team_id = $1
         order by fired_at desc, alert_id desc limit $2",
    )
    .bind(team.map(TeamId::as_str))
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    let ids: Vec<i64> = alerts.iter().map(|a| a.alert_id).collect();
    let deliveries: Vec<DeliveryRow> = sqlx::query_as(
        "select * from alert_delivery where alert_id = any($1) order by delivery_id",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    Ok(alerts
        .into_iter()
        .map(|a| {
            let mine = deliveries
                .iter()
                .filter(|d| d.alert_id == a.alert_id)
                .cloned()
                .collect();
            (a, mine)
        })
        .collect())
}
