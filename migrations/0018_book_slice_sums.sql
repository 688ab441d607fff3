-- A period's books summed per slice, kept beside the slice-days they are summed from (issue 12).
--
-- Billing prices per slice, team and rate card version, never per day (`period_slice_sums`). From
-- the books, that sum read the month's slice-days again: at 10,000 GPUs two million rows, hashed on
-- nine keys, for 70,000 sums. The invoice run did it right after writing those rows, and so did every
-- read of an issued month (its monthly report, the usage report's months, the dashboards' history).
-- The invoice run now writes the sums with the slice-days, in the same statement (one snapshot: the
-- same additions over the same rollups), and an issued month's sums are read as they were written:
-- 70,000 rows, not two million (a month of 2,000 GPUs: 0.03 s, against 1.2-1.7 s).
--
-- The same rules hold as for the slice-days (0011): no statement adds, changes or removes a row of an
-- issued month's sums; every row belongs to a month that has books; they go with their books.

create table book_slice_sums (
    period                date not null,
    team_id               text not null,
    model                 text not null,
    kind                  text not null,
    profile               text,
    rate_card_id          bigint,
    slice_id              integer not null,
    compute_share         numeric not null,
    memory_share          numeric not null,
    memory_reserved_bytes bigint not null,
    windows               bigint not null,
    first_day             timestamptz not null,
    held_seconds          numeric not null,
    known_seconds         numeric not null,
    active_seconds        numeric not null,
    memory_byte_seconds   numeric not null
);
create index book_slice_sums_period_idx on book_slice_sums (period);

-- The books already written, summed as `period_slice_sums` summed them; before the rules' triggers
-- exist, so that issued months get theirs too.
insert into book_slice_sums
select b.period, b.team_id, b.model, b.kind, b.profile, b.rate_card_id, b.slice_id,
       b.compute_share, b.memory_share, b.memory_reserved_bytes, sum(b.windows)::int8, min(b.day),
       sum(b.held_seconds), sum(b.known_seconds), sum(b.active_seconds),
       sum(b.memory_byte_seconds)
from book_slice_day b
group by b.period, b.team_id, b.model, b.kind, b.profile, b.rate_card_id, b.slice_id,
         b.compute_share, b.memory_share, b.memory_reserved_bytes;

create trigger book_slice_sums_inserted after insert on book_slice_sums
    referencing new table as new_rows for each statement execute function book_rows_inserted();
create trigger book_slice_sums_removed after delete on book_slice_sums
    referencing old table as old_rows for each statement execute function book_rows_removed();
create trigger book_slice_sums_updated after update on book_slice_sums
    referencing old table as old_rows new table as new_rows
    for each statement execute function book_rows_updated();

create or replace function book_removed() returns trigger language plpgsql as $$
declare
    p date;
begin
    for p in select period from old_books loop
        execute format('delete from book_slice_day where period = %L', p);
    end loop;
    delete from book_slice_sums s using old_books o where s.period = o.period;
    delete from book_model_day m using old_books o where m.period = o.period;
    return null;
end;
$$;

-- As in 0010, but an issued month's sums are read as its invoice run wrote them.
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
    from book_slice_sums b
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
