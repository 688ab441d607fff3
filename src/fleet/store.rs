//! The fleet's rows: GPUs, their slices and who held each slice in the last hour; a GPU's node.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use crate::domain::batch::DraClaim;
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;

#[derive(Debug, Clone)]
pub struct FleetSliceRow {
    pub gpu_uuid: String,
    pub node: String,
    pub model: String,
    pub memory_bytes: i64,
    pub mig_enabled: bool,
    pub last_present: Option<DateTime<Utc>>,
    pub slice_uuid: Option<String>,
    pub kind: Option<SliceKind>,
    pub profile: Option<String>,
    pub gpu_instance_id: Option<i16>,
    pub compute_share: Option<Decimal>,
    pub memory_share: Option<Decimal>,
    pub consumer_team: Option<TeamId>,
    pub consumer_namespace: Option<String>,
    pub consumer_pod: Option<String>,
    pub consumer_container: Option<String>,
    pub consumer_user: Option<String>,
    pub consumer_dra_claim: Option<sqlx::types::Json<DraClaim>>,
}

/// Whether [`slices`] finds each GPU's last hour present (`GET /v1/fleet` says it; the dashboard's
/// map does not, and at 10,000 GPUs it is most of the read: a month of `gpu_daily`, then the last
/// day's hours).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastPresent {
    Found,
    Skipped,
}

/// One row per slice (or per GPU without slices), with the slice's most recent consumer in the
/// rollups of the last hour, if any.
pub async fn slices(
    pool: &PgPool,
    now: DateTime<Utc>,
    last_present: LastPresent,
) -> Result<Vec<FleetSliceRow>, sqlx::Error> {
    sqlx::query_as!(
        FleetSliceRow,
        r#"with current_consumer as (
               select distinct on (u.slice_id) u.slice_id, u.consumer_id from usage_hourly u
               where u.hour >= date_trunc('hour', $1::timestamptz, 'UTC') - interval '1 hour' and u.hour <= $1
               order by u.slice_id, u.hour desc, u.held_seconds desc),
           last_day as (
               select d.gpu_id, max(d.day) as day from gpu_daily d
               where $2 and d.day >= date_trunc('day', $1::timestamptz - interval '31 days', 'UTC')
               group by d.gpu_id),
           -- Each GPU's last hour, found in its last day's hours: the day rollups narrow a month
           -- of hours to the last day or so.
           present as (
               select h.gpu_id, max(h.hour) + interval '1 hour' as until
               from last_day l
               join gpu_hourly h on h.gpu_id = l.gpu_id
                                and h.hour >= l.day and h.hour < l.day + interval '1 day'
               where $2 and h.hour >= (select min(day) from last_day)
                 and h.hour >= $1::timestamptz - interval '31 days'
               group by h.gpu_id)
           select g.gpu_uuid, g.node, g.model, g.memory_bytes, g.mig_enabled,
                  p.until as "last_present?",
                  s.slice_uuid as "slice_uuid?", s.kind as "kind?: SliceKind", s.profile, s.gpu_instance_id,
                  s.compute_share as "compute_share?", s.memory_share as "memory_share?",
                  case when c.consumer_id is not null
                       then consumer_team_at(c.team_label, c.namespace, $1) end as "consumer_team?: TeamId",
                  c.namespace as consumer_namespace,
                  c.pod as consumer_pod, c.container as consumer_container,
                  c.unix_user as consumer_user,
                  c.dra_claim as "consumer_dra_claim: sqlx::types::Json<DraClaim>"
           from gpu g
           left join present p on p.gpu_id = g.gpu_id
           left join slice s on s.gpu_id = g.gpu_id
           left join current_consumer cc on cc.slice_id = s.slice_id
           left join consumer c on c.consumer_id = cc.consumer_id
           order by g.node, g.gpu_uuid, s.slice_uuid"#,
        now,
        last_present == LastPresent::Found
    )
    .fetch_all(pool)
    .await
}

/// The end of the latest period any GPU was reported present.
pub async fn last_presence(pool: &PgPool) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar!("select max(period_end) from gpu_presence")
        .fetch_one(pool)
        .await
}

/// A GPU's registration: which node may report it.
#[derive(Debug, Clone)]
pub struct GpuRow {
    pub gpu_uuid: String,
    pub node: String,
    pub model: String,
    pub memory_bytes: i64,
    pub mig_enabled: bool,
}

/// Locks a GPU's row until the transaction ends; the node it belongs to, `None` if there is no such
/// GPU.
pub async fn lock_gpu(conn: &mut PgConnection, uuid: &str) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!("select node from gpu where gpu_uuid = $1 for update", uuid)
        .fetch_optional(&mut *conn)
        .await
}

pub async fn set_node(
    conn: &mut PgConnection,
    uuid: &str,
    node: &str,
) -> Result<GpuRow, sqlx::Error> {
    sqlx::query_as!(
        GpuRow,
        "update gpu set node = $2 where gpu_uuid = $1
         returning gpu_uuid, node, model, memory_bytes, mig_enabled",
        uuid,
        node
    )
    .fetch_one(&mut *conn)
    .await
}
