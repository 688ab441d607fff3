-- The day rollup at the team's grain (issue 12, item 2): what an open month's report and an issued
-- month's corrections sum (the invoice run still writes its books per slice, from `usage_daily`).
--
-- A month of `usage_daily` at 10,000 GPUs is 2.1 million rows (a row per slice, consumer and day),
-- and every open month's report and every correction summed them all. Billing needs only
-- (team, GPU model, slice kind, profile, rate card version) and each slice's shares: a row per
-- (day, team, model, kind, profile, shares) holds the same sums, 720 rows for that month. Ingest
-- adds to it in the statement that adds to the hourly and day rollups; a team change that moves
-- consumers moves their days from one team's rows to the other's (`move_consumers_days`).
--
-- What cannot be summed over days is how many distinct slices a line has: `usage_month_days`
-- keeps, per month, slice and consumer, the days it was held on (bit d-1 for day d), set when
-- ingest first writes the slice's day rollup row for that consumer.
--
-- Days a rate card version starts after midnight are priced hour by hour, from the hourly rollups,
-- as before; the day rows are read for whole days only.

create table usage_team_daily (
    day                    timestamptz not null,
    team_id                text not null,
    model                  text not null,
    kind                   text not null,
    profile                text,
    compute_share          numeric not null,
    memory_share           numeric not null,
    memory_reserved_bytes  bigint not null,
    held_seconds           numeric not null check (held_seconds >= 0),
    memory_byte_seconds    numeric not null check (memory_byte_seconds >= 0),
    compute_active_seconds numeric not null check (compute_active_seconds >= 0),
    compute_known_seconds  numeric not null check (compute_known_seconds >= 0),
    window_count           bigint not null check (window_count >= 0),
    unique nulls not distinct (day, team_id, model, kind, profile, compute_share, memory_share,
                               memory_reserved_bytes),
    check (date_trunc('day', day, 'UTC') = day)
);

create table usage_month_days (
    month       timestamptz not null,
    gpu_id      integer not null,
    slice_id    integer not null,
    consumer_id bigint not null,
    days        integer not null check (days <> 0),
    primary key (month, slice_id, gpu_id, consumer_id),
    check (date_trunc('month', month, 'UTC') = month)
);

-- The bit of a day in its month's `days`.
create function day_bit(d timestamptz) returns integer
language sql immutable parallel safe as $$
    select 1 << (extract(day from d at time zone 'UTC')::int - 1)
$$;

-- Both summed from `usage_daily` as it stands, into empty tables: what is already stored, once, and
-- what `slicemeter-bench scale` writes with SQL.
create function fill_team_day_rollups() returns void
language sql as $$
    insert into usage_team_daily
    select d.day, c.team_id, g.model, s.kind, s.profile, s.compute_share, s.memory_share,
           s.memory_reserved_bytes, sum(d.held_seconds), sum(d.memory_byte_seconds),
           sum(d.compute_active_seconds), sum(d.compute_known_seconds), sum(d.window_count)
    from usage_daily d
    join consumer c on c.consumer_id = d.consumer_id
    join slice s on s.slice_id = d.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    group by 1, 2, 3, 4, 5, 6, 7, 8;

    insert into usage_month_days
    select date_trunc('month', d.day, 'UTC'), d.gpu_id, d.slice_id, d.consumer_id,
           bit_or(day_bit(d.day))
    from usage_daily d
    group by 1, 2, 3, 4;
$$;

select fill_team_day_rollups();

-- The day rollups of `consumers` whose team is no longer the one in `from_teams` (in the same
-- order), with the team each had and the one it has now.
create function moved_consumer_days(consumers bigint[], from_teams text[])
returns table (day timestamptz, from_team text, to_team text, model text, kind text,
               profile text, compute_share numeric, memory_share numeric,
               memory_reserved_bytes bigint, held numeric, memory numeric, active numeric,
               known numeric, windows integer)
language sql stable as $$
    select d.day, m.from_team, c.team_id, g.model, s.kind, s.profile, s.compute_share,
           s.memory_share, s.memory_reserved_bytes, d.held_seconds, d.memory_byte_seconds,
           d.compute_active_seconds, d.compute_known_seconds, d.window_count
    from unnest(consumers, from_teams) as m(consumer_id, from_team)
    join consumer c on c.consumer_id = m.consumer_id and c.team_id <> m.from_team
    join usage_month_days k on k.consumer_id = m.consumer_id
    -- Each day whose bit is set (a UTC midnight, stepped without a time zone), then its day
    -- rollup row by its whole key: a lookup per day held, not a scan of every month's rows.
    cross join lateral (
        select (k.month at time zone 'UTC' + b * interval '1 day') at time zone 'UTC' as day
        from generate_series(0, 30) b
        where k.days & (1 << b) <> 0) x
    join usage_daily d on d.day = x.day and d.slice_id = k.slice_id and d.gpu_id = k.gpu_id
                      and d.consumer_id = k.consumer_id
    join slice s on s.slice_id = d.slice_id
    join gpu g on g.gpu_id = s.gpu_id
$$;

-- Moves the day rollups of `consumers` from the team each had (`from_teams`, in the same order)
-- to the one it has now: subtracted from the one's rows, added to the other's, rows left with
-- nothing removed. Three statements, since one consumer may leave a row another joins. The
-- caller holds `usage_team_daily` in share row exclusive mode from before it changed the
-- consumers' team until it commits, so that no ingest adds to the rows meanwhile under the team
-- it read before.
create function move_consumers_days(consumers bigint[], from_teams text[]) returns void
language sql as $$
    -- Subtracted by an update: an insert's row meets the table's checks before its conflict.
    update usage_team_daily t set
        held_seconds = t.held_seconds - x.held,
        memory_byte_seconds = t.memory_byte_seconds - x.memory,
        compute_active_seconds = t.compute_active_seconds - x.active,
        compute_known_seconds = t.compute_known_seconds - x.known,
        window_count = t.window_count - x.windows
    from (select day, from_team, model, kind, profile, compute_share, memory_share,
                 memory_reserved_bytes, sum(held) as held, sum(memory) as memory,
                 sum(active) as active, sum(known) as known, sum(windows) as windows
          from moved_consumer_days(consumers, from_teams)
          group by 1, 2, 3, 4, 5, 6, 7, 8) x
    where t.day = x.day and t.team_id = x.from_team and t.model = x.model and t.kind = x.kind
      and t.profile is not distinct from x.profile and t.compute_share = x.compute_share
      and t.memory_share = x.memory_share and t.memory_reserved_bytes = x.memory_reserved_bytes;

    insert into usage_team_daily
    select day, to_team, model, kind, profile, compute_share, memory_share, memory_reserved_bytes,
           sum(held), sum(memory), sum(active), sum(known), sum(windows)
    from moved_consumer_days(consumers, from_teams)
    group by 1, 2, 3, 4, 5, 6, 7, 8
    on conflict (day, team_id, model, kind, profile, compute_share, memory_share,
                 memory_reserved_bytes) do update set
        held_seconds = usage_team_daily.held_seconds + excluded.held_seconds,
        memory_byte_seconds = usage_team_daily.memory_byte_seconds + excluded.memory_byte_seconds,
        compute_active_seconds = usage_team_daily.compute_active_seconds + excluded.compute_active_seconds,
        compute_known_seconds = usage_team_daily.compute_known_seconds + excluded.compute_known_seconds,
        window_count = usage_team_daily.window_count + excluded.window_count;

    delete from usage_team_daily
    where window_count = 0 and held_seconds = 0 and memory_byte_seconds = 0
      and compute_active_seconds = 0 and compute_known_seconds = 0;
$$;

-- A month's usage per (team, model, kind, profile, rate card version, shares), for billing and the
-- month's report before it is issued: whole days from `usage_team_daily` under the version in force
-- at their start; days a version starts after midnight from the hourly rollups, each hour under its
-- own. Each line's distinct slices come as rows of their own, with `slices` set and every sum zero,
-- so that the caller adds up both kinds of rows per line alike.
create function period_team_lines(p date)
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
        select h.slice_id, c.team_id, r.rate_card_id, h.hour, h.window_count, h.held_seconds,
               h.compute_known_seconds, h.compute_active_seconds, h.memory_byte_seconds
        from usage_hourly h
        join consumer c on c.consumer_id = h.consumer_id
        left join rate_card_span r
               on h.hour >= r.effective_from
              and (r.effective_until is null or h.hour < r.effective_until)
        where h.hour >= (p::timestamp at time zone 'UTC')
          and h.hour < ((p + interval '1 month') at time zone 'UTC')
          and date_trunc('day', h.hour, 'UTC') in (select split_days(p))),
    -- The slices of each team and version: whole days by the days each was held on, split days by
    -- their hours. Slice first, so that the sort that makes them distinct compares integers.
    held_slices as (
        select k.slice_id, v.rate_card_id, c.team_id
        from usage_month_days k
        join (select rate_card_id, bit_or(day_bit(day)) as days from whole_days
              group by rate_card_id) v on k.days & v.days <> 0
        join consumer c on c.consumer_id = k.consumer_id
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
