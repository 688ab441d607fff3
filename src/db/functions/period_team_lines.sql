-- period_team_lines: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0023_namespace_ownership.sql). Change it here; see docs/architecture.md, Storage.
-- As in 0022, each row's team its own.
create or replace function period_team_lines(p date)
returns table (team_id text, model text, kind text, profile text, rate_card_id bigint,
               compute_share numeric, memory_share numeric, memory_reserved_bytes bigint,
               slices bigint, windows bigint, first_day timestamptz, held numeric, known numeric,
               active numeric, memory numeric)
language sql stable as $$
    with whole_days as (
        select x.t at time zone 'UTC' as day, r.rate_card_id
        from generate_series(p::timestamp,
                             (p + interval '1 month')::timestamp - interval '1 day',
                             interval '1 day') x(t)
        left join rate_card_span r
               on x.t at time zone 'UTC' >= r.effective_from
              and (r.effective_until is null or x.t at time zone 'UTC' < r.effective_until)
        where x.t at time zone 'UTC' not in (select split_days(p))),
    split_hours as (
        select h.slice_id, h.team_id, r.rate_card_id, h.hour, h.window_count, h.held_seconds,
               h.compute_known_seconds, h.compute_active_seconds, h.memory_byte_seconds
        from usage_hourly h
        left join rate_card_span r
               on h.hour >= r.effective_from
              and (r.effective_until is null or h.hour < r.effective_until)
        where h.hour >= (p::timestamp at time zone 'UTC')
          and h.hour < ((p + interval '1 month') at time zone 'UTC')
          and date_trunc('day', h.hour, 'UTC') in (select split_days(p))),
    held_slices as (
        select k.slice_id, v.rate_card_id, k.team_id
        from usage_month_days k
        join (select rate_card_id, bit_or(day_bit(day)) as days from whole_days
              group by rate_card_id) v on k.days & v.days <> 0
        where k.month = (p::timestamp at time zone 'UTC')
        union
        select slice_id, rate_card_id, team_id from split_hours)
    select t.team_id, t.model, t.kind, t.profile, v.rate_card_id, t.compute_share, t.memory_share,
           t.memory_reserved_bytes, 0::int8, sum(t.window_count)::int8, min(t.day),
           sum(t.held_seconds), sum(t.compute_known_seconds), sum(t.compute_active_seconds),
           sum(t.memory_byte_seconds)
    from usage_team_daily t
    join whole_days v on v.day = t.day
    where t.day >= (p::timestamp at time zone 'UTC')
      and t.day < ((p + interval '1 month') at time zone 'UTC')
    group by 1, 2, 3, 4, 5, 6, 7, 8
    union all
    select h.team_id, g.model, s.kind, s.profile, h.rate_card_id, s.compute_share, s.memory_share,
           s.memory_reserved_bytes, 0, sum(h.window_count)::int8,
           min(date_trunc('day', h.hour, 'UTC')), sum(h.held_seconds),
           sum(h.compute_known_seconds), sum(h.compute_active_seconds), sum(h.memory_byte_seconds)
    from split_hours h
    join slice s on s.slice_id = h.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    group by 1, 2, 3, 4, 5, 6, 7, 8
    union all
    select k.team_id, g.model, s.kind, s.profile, k.rate_card_id, s.compute_share, s.memory_share,
           s.memory_reserved_bytes, count(*), 0, null, 0, 0, 0, 0
    from held_slices k
    join slice s on s.slice_id = k.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    group by 1, 2, 3, 4, 5, 6, 7, 8
$$;
