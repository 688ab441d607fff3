-- A month's usage books, one row per (team, slice, rate card version) with its days in arrays
-- (issue 12).
--
-- The invoice run wrote a month's usage books twice over: a row per (team, slice, rate card
-- version, day) in `book_slice_day`, for the exports, and their sums per (team, slice, rate card
-- version) in `book_slice_sums`, for pricing. At 10,000 GPUs that is 2.1 million rows of about 200
-- bytes, each repeating its slice's names, shares and team, for 70,000 sums: writing them was most
-- of the run (23.4 s of it, against 4.2 s for pricing the month). `book_slice` keeps both in one
-- row per sum: the sums billing prices, the names the exports print, and the day figures as
-- parallel arrays (`days[i]` with `day_held[i]` ...), which `period_slice_day` unnests. The same
-- rows come out, the same additions go in.
--
-- The books' rules (0011) hold for it as for the others: no statement adds, changes or removes a
-- row of an issued month; every row belongs to a month that has books.

create table book_slice (
    period                date not null,
    team_id               text not null,
    team_name             text not null,
    cost_center           text,
    model                 text not null,
    kind                  text not null,
    profile               text,
    rate_card_id          bigint,
    slice_id              integer not null,
    slice_uuid            text not null,
    node                  text not null,
    compute_share         numeric not null,
    memory_share          numeric not null,
    memory_reserved_bytes bigint not null,
    windows               bigint not null,
    first_day             timestamptz not null,
    held_seconds          numeric not null,
    known_seconds         numeric not null,
    active_seconds        numeric not null,
    memory_byte_seconds   numeric not null,
    days                  timestamptz[] not null,
    day_windows           bigint[] not null,
    day_held              numeric[] not null,
    day_known             numeric[] not null,
    day_active            numeric[] not null,
    day_memory            numeric[] not null,
    check (cardinality(days) > 0
           and cardinality(day_windows) = cardinality(days)
           and cardinality(day_held) = cardinality(days)
           and cardinality(day_known) = cardinality(days)
           and cardinality(day_active) = cardinality(days)
           and cardinality(day_memory) = cardinality(days))
);
create index book_slice_period_idx on book_slice (period);

-- The books already written, issued months included, before the rules' triggers exist.
insert into book_slice
select period, team_id, team_name, cost_center, model, kind, profile, rate_card_id, slice_id,
       slice_uuid, node, compute_share, memory_share, memory_reserved_bytes,
       sum(windows)::int8, min(day), sum(held_seconds), sum(known_seconds), sum(active_seconds),
       sum(memory_byte_seconds),
       array_agg(day order by day), array_agg(windows order by day),
       array_agg(held_seconds order by day), array_agg(known_seconds order by day),
       array_agg(active_seconds order by day), array_agg(memory_byte_seconds order by day)
from book_slice_day
group by period, team_id, team_name, cost_center, model, kind, profile, rate_card_id, slice_id,
         slice_uuid, node, compute_share, memory_share, memory_reserved_bytes;

create trigger book_slice_inserted after insert on book_slice
    referencing new table as new_rows for each statement execute function book_rows_inserted();
create trigger book_slice_removed after delete on book_slice
    referencing old table as old_rows for each statement execute function book_rows_removed();
create trigger book_slice_updated after update on book_slice
    referencing old table as old_rows new table as new_rows
    for each statement execute function book_rows_updated();

-- Both functions read the books they replace; `period_slice_day` returned their row type.
drop function period_slice_day(date, boolean);
drop table book_slice_day;
drop table book_slice_sums;

-- A month's usage from the rollups per (slice, team, rate card version, day), on those keys alone
-- (0016's summing, unchanged): the invoice run gathers each (slice, team, version)'s days into one
-- row of the books, and `period_slice_day` names them. Its readers order the days themselves.
create function period_slice_keys(p date)
returns table (slice_id integer, team_id text, rate_card_id bigint, day timestamptz,
               windows bigint, held numeric, known numeric, active numeric, memory numeric)
language sql stable as $$
    select u.slice_id, c.team_id, u.rate_card_id, u.day, sum(u.window_count)::int8,
           sum(u.held_seconds), sum(u.compute_known_seconds), sum(u.compute_active_seconds),
           sum(u.memory_byte_seconds)
    from (
        -- Whole days: the day rollup, each day with the version in force at its start.
        select d.day, d.slice_id, d.consumer_id, m.rate_card_id, d.window_count, d.held_seconds,
               d.compute_known_seconds, d.compute_active_seconds, d.memory_byte_seconds
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
        union all
        -- Days a version starts after midnight: hour by hour, each under its own version.
        select date_trunc('day', h.hour, 'UTC'), h.slice_id, h.consumer_id, r.rate_card_id,
               h.window_count, h.held_seconds, h.compute_known_seconds, h.compute_active_seconds,
               h.memory_byte_seconds
        from usage_hourly h
        left join rate_card_span r
               on h.hour >= r.effective_from
              and (r.effective_until is null or h.hour < r.effective_until)
        where h.hour >= (p::timestamp at time zone 'UTC')
          and h.hour < ((p + interval '1 month') at time zone 'UTC')
          and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
    ) u
    join consumer c using (consumer_id)
    group by u.slice_id, c.team_id, u.rate_card_id, u.day
$$;

-- A month's usage per (team, slice, rate card version, day), named: from its books, unnested, or
-- from the rollups, with the names and shares of now.
create function period_slice_day(p date, from_book boolean)
returns table (period date, team_id text, team_name text, cost_center text, model text,
               kind text, profile text, rate_card_id bigint, slice_id integer, slice_uuid text,
               node text, day timestamptz, windows bigint, held_seconds numeric,
               known_seconds numeric, active_seconds numeric, memory_byte_seconds numeric,
               compute_share numeric, memory_share numeric, memory_reserved_bytes bigint)
language sql stable as $$
    select b.period, b.team_id, b.team_name, b.cost_center, b.model, b.kind, b.profile,
           b.rate_card_id, b.slice_id, b.slice_uuid, b.node, d.day, d.windows, d.held, d.known,
           d.active, d.memory, b.compute_share, b.memory_share, b.memory_reserved_bytes
    from book_slice b
    cross join lateral unnest(b.days, b.day_windows, b.day_held, b.day_known, b.day_active,
                              b.day_memory) as d(day, windows, held, known, active, memory)
    where from_book and b.period = p
    union all
    select p, k.team_id, coalesce(t.display_name, k.team_id), t.cost_center,
           g.model, s.kind, s.profile, k.rate_card_id, s.slice_id, s.slice_uuid, g.node, k.day,
           k.windows, k.held, k.known, k.active, k.memory,
           s.compute_share, s.memory_share, s.memory_reserved_bytes
    from period_slice_keys(p) k
    join slice s on s.slice_id = k.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    left join team t on t.team_id = k.team_id
    where not from_book
$$;

-- As in 0018, an issued month's sums read from its books: each row is one already.
create or replace function period_slice_sums(p date, from_book boolean)
returns table (team_id text, model text, kind text, profile text, rate_card_id bigint,
               slice_id integer, compute_share numeric, memory_share numeric,
               memory_reserved_bytes bigint, windows bigint, first_day timestamptz,
               held_seconds numeric, known_seconds numeric, active_seconds numeric,
               memory_byte_seconds numeric)
language sql stable as $$
    select b.team_id, b.model, b.kind, b.profile, b.rate_card_id, b.slice_id, b.compute_share,
           b.memory_share, b.memory_reserved_bytes, b.windows, b.first_day, b.held_seconds,
           b.known_seconds, b.active_seconds, b.memory_byte_seconds
    from book_slice b
    where from_book and b.period = p
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
