-- period_usage_days: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0023_namespace_ownership.sql). Change it here; see docs/architecture.md, Storage.
create or replace function period_usage_days(p date)
returns table (slice_id integer, consumer_id bigint, team_id text, rate_card_id bigint,
               day timestamptz, windows bigint, held numeric, known numeric, active numeric,
               memory numeric)
language sql stable as $$
    select d.slice_id, d.consumer_id, d.team_id,
           -- The version in force at each day's start (a UTC midnight, stepped without a time
           -- zone: no daylight saving), by day of the month.
           (select array_agg(r.rate_card_id order by x.t)
            from generate_series(p::timestamp,
                                 (p + interval '1 month')::timestamp - interval '1 day',
                                 interval '1 day') x(t)
            left join rate_card_span r
                   on x.t at time zone 'UTC' >= r.effective_from
                  and (r.effective_until is null or x.t at time zone 'UTC' < r.effective_until)
           )[extract(day from d.day at time zone 'UTC')::int],
           d.day, d.window_count::int8, d.held_seconds, d.compute_known_seconds,
           d.compute_active_seconds, d.memory_byte_seconds
    from usage_daily d
    where d.day >= (p::timestamp at time zone 'UTC')
      and d.day < ((p + interval '1 month') at time zone 'UTC')
      and d.day not in (select split_days(p))
    union all
    select h.slice_id, h.consumer_id, h.team_id, r.rate_card_id, date_trunc('day', h.hour, 'UTC'),
           sum(h.window_count)::int8, sum(h.held_seconds), sum(h.compute_known_seconds),
           sum(h.compute_active_seconds), sum(h.memory_byte_seconds)
    from usage_hourly h
    left join rate_card_span r
           on h.hour >= r.effective_from
          and (r.effective_until is null or h.hour < r.effective_until)
    where h.hour >= (p::timestamp at time zone 'UTC')
      and h.hour < ((p + interval '1 month') at time zone 'UTC')
      and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
    group by 1, 2, 3, 4, 5
$$;
