//! Report queries. They read the hourly rollups only, never the raw windows.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::team::TeamId;
use crate::domain::usage::OccupancySums;
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
    let rows = sqlx::query!(
        // Sum per (bucket, slice, team) first, additions only; weigh by the slices' shares after.
        r#"with per_slice as (
               select date_trunc($3, u.hour, 'UTC') as bucket, u.slice_id, c.team_id,
                      sum(u.held_seconds) as held, sum(u.compute_known_seconds) as known,
                      sum(u.compute_active_seconds) as active, sum(u.memory_byte_seconds) as memory,
                      sum(u.window_count)::int8 as windows
               from usage_hourly u
               join consumer c using (consumer_id)
               where u.hour >= $1 and u.hour < $2 and ($5::text is null or c.team_id = $5)
               group by 1, 2, 3)
           select p.bucket as "bucket!",
                  (case $4::text when 'team' then p.team_id
                                 when 'gpu_model' then g.model
                                 when 'kind' then s.kind
                                 when 'profile' then coalesce(s.profile, s.kind)
                                 when 'node' then g.node end) as "key!",
                  s.reserved as "reserved!",
                  round(sum(p.held), 9) as "held_seconds!",
                  round(sum(p.held * s.compute_share), 9) as "held_compute!",
                  round(sum(p.held * s.memory_share), 9) as "held_memory!",
                  round(sum(p.known), 9) as "known_seconds!",
                  round(sum(p.known * s.compute_share), 9) as "known_compute!",
                  round(sum(p.active), 9) as "active_seconds!",
                  round(sum(p.active * s.compute_share), 9) as "active_compute!",
                  round(sum(p.memory) / 1073741824, 9) as "memory_gib_seconds!",
                  round(sum(p.memory * s.memory_share / s.memory_reserved_bytes), 9) as "memory_used!",
                  sum(p.windows)::int8 as "windows!"
           from per_slice p
           join slice s using (slice_id)
           join gpu g using (gpu_id)
           group by 1, 2, 3
           order by 1, 2, 3"#,
        from,
        to,
        step.as_str(),
        group_by.as_str(),
        team.map(TeamId::as_str)
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| UsageSums {
            bucket: r.bucket,
            key: r.key,
            reserved: r.reserved,
            sums: OccupancySums {
                held_seconds: r.held_seconds,
                held_compute: r.held_compute,
                held_memory: r.held_memory,
                known_seconds: r.known_seconds,
                known_compute: r.known_compute,
                active_seconds: r.active_seconds,
                active_compute: r.active_compute,
                memory_gib_seconds: r.memory_gib_seconds,
                memory_used: r.memory_used,
                windows: r.windows,
            },
        })
        .collect())
}

/// The consumers no team claims now that held slices in `[from, to)`, most held first.
pub async fn unattributed_consumers(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<crate::billing::report::UnattributedConsumer>, sqlx::Error> {
    sqlx::query_as!(
        crate::billing::report::UnattributedConsumer,
        r#"select c.namespace, c.pod, c.container, c.unix_user, c.job_id,
                  round(sum(u.held_seconds) / 3600, 6) as "slice_hours!"
           from usage_hourly u join consumer c using (consumer_id)
           where c.team_id = 'unattributed' and u.hour >= $1 and u.hour < $2
           group by c.consumer_id
           order by 6 desc, c.consumer_id
           limit 50"#,
        from,
        to
    )
    .fetch_all(pool)
    .await
}
