-- fill_team_day_rollups: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0023_namespace_ownership.sql). Change it here; see docs/architecture.md, Storage.
-- As in 0022, the team each day rollup row holds.
create or replace function fill_team_day_rollups() returns void
language sql as $$
    insert into usage_team_daily
    select d.day, d.team_id, g.model, s.kind, s.profile, s.compute_share, s.memory_share,
           s.memory_reserved_bytes, sum(d.held_seconds), sum(d.memory_byte_seconds),
           sum(d.compute_active_seconds), sum(d.compute_known_seconds), sum(d.window_count)
    from usage_daily d
    join slice s on s.slice_id = d.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    group by 1, 2, 3, 4, 5, 6, 7, 8;

    insert into usage_month_days
    select date_trunc('month', d.day, 'UTC'), d.gpu_id, d.slice_id, d.consumer_id,
           bit_or(day_bit(d.day)), d.team_id
    from usage_daily d
    group by 1, 2, 3, 4, 6;
$$;
