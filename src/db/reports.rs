//! Report queries. They read the hourly rollups only, never the raw windows.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::team::TeamId;
use crate::reports::usage::{GroupBy, Step, UsageSums};

/// Sums of the rollups per (bucket, group key, reserved), the terms DESIGN.md's share formula is
/// linear in, weighted by each slice's compute and memory share. `reports::usage` applies the weights.
pub async fn usage_sums(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: GroupBy,
    step: Step,
    team: Option<&TeamId>,
) -> Result<Vec<UsageSums>, sqlx::Error> {
    sqlx::query_as!(
        UsageSums,
        r#"select date_trunc($3, u.hour, 'UTC') as "bucket!",
                  (case $4::text when 'team' then c.team_id
                                 when 'gpu_model' then g.model
                                 when 'kind' then s.kind
                                 when 'profile' then coalesce(s.profile, s.kind)
                                 when 'node' then g.node end) as "key!",
                  s.reserved as "reserved!",
                  round(sum(u.held_seconds), 9) as "held_seconds!",
                  round(sum(u.held_seconds * s.compute_share), 9) as "held_compute!",
                  round(sum(u.held_seconds * s.memory_share), 9) as "held_memory!",
                  round(sum(u.compute_known_seconds), 9) as "known_seconds!",
                  round(sum(u.compute_known_seconds * s.compute_share), 9) as "known_compute!",
                  round(sum(u.compute_active_seconds), 9) as "active_seconds!",
                  round(sum(u.compute_active_seconds * s.compute_share), 9) as "active_compute!",
                  round(sum(u.memory_byte_seconds) / 1073741824, 9) as "memory_gib_seconds!",
                  round(sum(u.memory_byte_seconds * s.memory_share / s.memory_reserved_bytes), 9)
                      as "memory_used!",
                  sum(u.window_count)::int8 as "windows!"
           from usage_hourly u
           join slice s using (slice_id)
           join gpu g using (gpu_id)
           join consumer c using (consumer_id)
           where u.hour >= $1 and u.hour < $2 and ($5::text is null or c.team_id = $5)
           group by 1, 2, 3
           order by 1, 2, 3"#,
        from,
        to,
        step.as_str(),
        group_by.as_str(),
        team.map(TeamId::as_str)
    )
    .fetch_all(pool)
    .await
}
