-- `reports::store::usage_sums` as it read before issue 41 (per row: each day rollup row joined to
-- its consumer and named, then summed per slice), kept as the reference the per-consumer read must
-- equal (tests/api/usage_per_consumer.rs). The same binds, in the same order.
with split as (
       select distinct date_trunc('day', r.effective_from, 'UTC') as day
       from rate_card r
       where r.effective_from <> date_trunc('day', r.effective_from, 'UTC')
         and r.effective_from >= $5 and r.effective_from < $6),
   rollup as not materialized (
       select d.day as at, d.slice_id, d.consumer_id, d.team_id, d.held_seconds,
              d.compute_known_seconds, d.compute_active_seconds, d.memory_byte_seconds,
              d.window_count
       from usage_daily d
       where d.day >= $5 and d.day < $6 and d.day not in (select day from split)
         and not $17
       -- The hours before the first whole day and from the last on (all of them when
       -- there is none), and split days': ranges of the key, so that a month of whole
       -- days reads no hourly row at all.
       union all
       select h.hour, h.slice_id, h.consumer_id, h.team_id, h.held_seconds,
              h.compute_known_seconds, h.compute_active_seconds, h.memory_byte_seconds,
              h.window_count
       from usage_hourly h
       where h.hour >= $1 and h.hour < coalesce($5, $2)
       union all
       select h.hour, h.slice_id, h.consumer_id, h.team_id, h.held_seconds,
              h.compute_known_seconds, h.compute_active_seconds, h.memory_byte_seconds,
              h.window_count
       from usage_hourly h
       where h.hour >= coalesce($6, $2) and h.hour < $2
       union all
       select h.hour, h.slice_id, h.consumer_id, h.team_id, h.held_seconds,
              h.compute_known_seconds, h.compute_active_seconds, h.memory_byte_seconds,
              h.window_count
       from split x
       join usage_hourly h on h.hour >= x.day and h.hour < x.day + interval '1 day'),
   -- Each hour of the range with the rate card version in force: a row finds its version
   -- by an equal hour, not by a range join per row.
   cards as (
       select t.at, r.rate_card_id
       from generate_series(date_trunc('hour', $1, 'UTC'), $2, interval '1 hour') t(at)
       join rate_card_span r
         on t.at >= r.effective_from
        and (r.effective_until is null or t.at < r.effective_until)),
   -- Each row in its bucket, with its team (the row's own: a consumer's usage goes to the
   -- owner of its namespace at the time), version and the consumer's fields asked for.
   named as not materialized (
       select date_trunc($3, u.at, 'UTC') as bucket, u.slice_id, u.team_id, v.rate_card_id,
              case when $8 then c.namespace end as namespace,
              case when $9 then (workload_of(c.pod, c.labels, c.job_id, c.unix_user))[2]
              end as workload,
              case when $10 then c.pod end as pod,
              case when $11 then c.container end as container,
              case when cardinality($12::text[]) > 0 then
                  array(select c.labels ->> k.key
                        from unnest($12::text[]) with ordinality as k(key, n)
                        order by k.n)
              end as labels,
              case when $15 then c.dra_claim end as dra_claim,
              u.held_seconds, u.compute_known_seconds, u.compute_active_seconds,
              u.memory_byte_seconds, u.window_count
       from rollup u
       join consumer c using (consumer_id)
       left join cards v on v.at = u.at
       where ($4::text is null or u.team_id = $4)),
   -- Months, and any step grouped by a consumer's fields: each slice's rows summed first
   -- (a month folds a slice's days into one group), its shares joined after.
   per_slice as (
       select n.bucket, n.slice_id, n.team_id, n.rate_card_id, n.namespace, n.workload,
              n.pod, n.container, n.labels, n.dra_claim,
              sum(n.held_seconds) as held, sum(n.compute_known_seconds) as known,
              sum(n.compute_active_seconds) as active, sum(n.memory_byte_seconds) as memory,
              sum(n.window_count)::int8 as windows
       from named n
       where not $16
       group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
   -- Days and hours by slice-level fields: a slice's rows barely fold there, so rows are
   -- summed per share class (model, kind, profile, shares), a few groups a bucket.
   per_class as (
       select n.bucket, n.team_id, n.rate_card_id, g.model, s.kind, s.profile, s.reserved,
              s.compute_share, s.memory_share, s.memory_reserved_bytes,
              case when $7 then g.node end as node,
              case when $13 then g.gpu_uuid end as gpu_uuid,
              case when $14 then s.gpu_instance_id end as gpu_instance_id,
              n.namespace, n.workload, n.pod, n.container, n.labels, n.dra_claim,
              sum(n.held_seconds) as held, sum(n.compute_known_seconds) as known,
              sum(n.compute_active_seconds) as active, sum(n.memory_byte_seconds) as memory,
              sum(n.window_count)::int8 as windows
       from named n
       join slice s using (slice_id)
       join gpu g using (gpu_id)
       where $16
       group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19),
   -- Whole days by the team's day rollup's fields only: its rows as they are, a few a
   -- day, summed with the others below.
   team_days as (
       select date_trunc($3, t.day, 'UTC') as bucket, t.team_id, v.rate_card_id, t.model,
              t.kind, t.profile, t.kind <> 'timeslice' as reserved, t.compute_share,
              t.memory_share, t.memory_reserved_bytes, null::text as node,
              null::text as gpu_uuid, null::int2 as gpu_instance_id,
              null::text as namespace, null::text as workload, null::text as pod,
              null::text as container, null::text[] as labels, null::jsonb as dra_claim,
              t.held_seconds as held, t.compute_known_seconds as known,
              t.compute_active_seconds as active, t.memory_byte_seconds as memory,
              t.window_count as windows
       from usage_team_daily t
       left join cards v on v.at = t.day
       where $17 and t.day >= $5 and t.day < $6 and t.day not in (select day from split)
         and ($4::text is null or t.team_id = $4)),
   classes as (
       select p.bucket, p.team_id, p.rate_card_id, g.model, s.kind, s.profile, s.reserved,
              s.compute_share, s.memory_share, s.memory_reserved_bytes,
              case when $7 then g.node end as node,
              case when $13 then g.gpu_uuid end as gpu_uuid,
              case when $14 then s.gpu_instance_id end as gpu_instance_id,
              p.namespace, p.workload, p.pod, p.container, p.labels, p.dra_claim,
              p.held, p.known, p.active, p.memory, p.windows
       from per_slice p
       join slice s using (slice_id)
       join gpu g using (gpu_id)
       union all
       select * from per_class
       union all
       select * from team_days)
   select p.bucket as bucket, p.team_id as team, p.model as model,
          p.kind as kind, p.profile, p.rate_card_id as rate_card,
          p.node, p.namespace, p.workload, p.pod, p.container,
          p.labels as labels, p.gpu_uuid, p.gpu_instance_id,
          p.dra_claim as dra_claim,
          p.reserved as reserved,
          round(sum(p.held), 9) as held_seconds,
          round(sum(p.held * p.compute_share), 9) as held_compute,
          round(sum(p.held * p.memory_share), 9) as held_memory,
          round(sum(p.known), 9) as known_seconds,
          round(sum(p.known * p.compute_share), 9) as known_compute,
          round(sum(p.active), 9) as compute_active_seconds,
          round(sum(p.active * p.compute_share), 9) as active_compute,
          round(sum(p.memory) / 1073741824, 9) as memory_gib_seconds,
          round(sum(p.memory * p.memory_share / p.memory_reserved_bytes), 9) as memory_used,
          sum(p.windows)::int8 as windows
   from classes p
   group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16
   order by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16
