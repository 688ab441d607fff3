-- A month's usage per slice, team and rate card version, summed (issue 12): what billing prices.
-- Billing needs no day: `period_slice_day` groups by day first (its rows are the books), which at
-- 10,000 GPUs is two million groups a month, hashed and spilled to disk, then grouped again per
-- slice. Here the day rollups are summed straight per (slice, consumer, rate card version), the
-- version found once per day of the month (a 31-row map, not a range join per row), then per
-- team; split days come from the hourly rows as in `period_slice_day`, and an issued month from its
-- books. The sums are the same additions in another order: exact.

create function period_slice_sums(p date, from_book boolean)
returns table (team_id text, model text, kind text, profile text, rate_card_id bigint,
               slice_id integer, compute_share numeric, memory_share numeric,
               memory_reserved_bytes bigint, windows bigint, first_day timestamptz,
               held_seconds numeric, known_seconds numeric, active_seconds numeric,
               memory_byte_seconds numeric)
language sql stable as $$
    select b.team_id, b.model, b.kind, b.profile, b.rate_card_id, b.slice_id, b.compute_share,
           b.memory_share, b.memory_reserved_bytes, sum(b.windows)::int8, min(b.day),
           sum(b.held_seconds), sum(b.known_seconds), sum(b.active_seconds),
           sum(b.memory_byte_seconds)
    from book_slice_day b
    where from_book and b.period = p
    group by b.team_id, b.model, b.kind, b.profile, b.rate_card_id, b.slice_id, b.compute_share,
             b.memory_share, b.memory_reserved_bytes
    union all
    select c.team_id, g.model, s.kind, s.profile, u.rate_card_id, s.slice_id, s.compute_share,
           s.memory_share, s.memory_reserved_bytes, sum(u.windows)::int8, min(u.first_day),
           sum(u.held), sum(u.known), sum(u.active), sum(u.memory)
    from (
        -- Whole days: the day rollup, each day with the version in force at its start.
        select d.slice_id, d.consumer_id, m.rate_card_id, sum(d.window_count) as windows,
               min(d.day) as first_day, sum(d.held_seconds) as held,
               sum(d.compute_known_seconds) as known, sum(d.compute_active_seconds) as active,
               sum(d.memory_byte_seconds) as memory
        from usage_daily d
        join (
            -- The days as UTC midnights, stepped without a time zone (no daylight saving).
            select x.day, r.rate_card_id
            from (select t at time zone 'UTC' as day
                  from generate_series(p::timestamp,
                                       (p + interval '1 month')::timestamp - interval '1 day',
                                       interval '1 day') t) x
            left join rate_card_span r
                   on x.day >= r.effective_from
                  and (r.effective_until is null or x.day < r.effective_until)
            where x.day not in (select split_days(p))
        ) m on m.day = d.day
        where d.day >= (p::timestamp at time zone 'UTC')
          and d.day < ((p + interval '1 month') at time zone 'UTC')
        group by d.slice_id, d.consumer_id, m.rate_card_id
        union all
        -- Days a version starts after midnight: hour by hour.
        select h.slice_id, h.consumer_id, r.rate_card_id, sum(h.window_count),
               min(date_trunc('day', h.hour, 'UTC')), sum(h.held_seconds),
               sum(h.compute_known_seconds), sum(h.compute_active_seconds),
               sum(h.memory_byte_seconds)
        from usage_hourly h
        left join rate_card_span r
               on h.hour >= r.effective_from
              and (r.effective_until is null or h.hour < r.effective_until)
        where h.hour >= (p::timestamp at time zone 'UTC')
          and h.hour < ((p + interval '1 month') at time zone 'UTC')
          and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
        group by h.slice_id, h.consumer_id, r.rate_card_id
    ) u
    join consumer c using (consumer_id)
    join slice s using (slice_id)
    join gpu g using (gpu_id)
    where not from_book
    group by c.team_id, g.model, s.kind, s.profile, u.rate_card_id, s.slice_id, s.compute_share,
             s.memory_share, s.memory_reserved_bytes
$$;
