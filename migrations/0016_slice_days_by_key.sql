-- A period's slice-days written and read faster (issue 12): at 10,000 GPUs a month's books are two
-- million of them, and writing them was most of an invoice run's time.
--
-- 1. The books' slice-days are partitioned by month and have no index. A month's books are only
--    ever read whole (summed to bill, or all in the exports' order), so their index bought nothing
--    the partition does not, while keeping it cost three times the rows' own insert (2.1 million
--    rows: 41 s of a 57 s write, measured on this project's machine). A default partition takes
--    rows of a month that has none, for the books' own trigger to refuse with its message; the
--    invoice run makes a month's partition before it writes the month's books.
-- 2. `period_slice_day` sums per (slice, team, rate card version, day) on those keys alone, then
--    names them. 0009 grouped the rows by the twelve columns the books print (team name, cost
--    center, model, node, shares ...) and found each row's rate card by a range join: two million
--    wide groups, hashed and spilled to disk (24.2 s at 10,000 GPUs, against 6.6 s now). Whole
--    days take the version in force at their midnight from a map of the month's days, as
--    `period_slice_sums` does. The same rows, the same additions.

create or replace function ensure_month_partition(p_parent text, p_month date) returns void
language plpgsql as $$
declare
    first_day date := date_trunc('month', p_month)::date;
    next_day  date := (date_trunc('month', p_month) + interval '1 month')::date;
    part      text := format('%s_y%sm%s', p_parent, to_char(first_day, 'YYYY'), to_char(first_day, 'MM'));
begin
    if p_parent not in ('occupancy', 'gpu_presence', 'usage_hourly', 'gpu_hourly', 'usage_daily',
                        'gpu_daily', 'book_slice_day') then
        raise exception 'ensure_month_partition: % is not a partitioned table of slicemeter', p_parent;
    end if;
    if to_regclass(format('%I.%I', current_schema(), part)) is null then
        perform pg_advisory_xact_lock(hashtext('slicemeter.ensure_month_partition'));
        execute format(
            'create table if not exists %I partition of %I for values from (%L) to (%L)',
            part, p_parent, first_day::text || ' 00:00:00+00', next_day::text || ' 00:00:00+00');
    end if;
end;
$$;

-- The function returns the table's row type: it goes first and comes back below.
drop function period_slice_day(date, boolean);
alter table book_slice_day rename to book_slice_day_unpartitioned;
create table book_slice_day (like book_slice_day_unpartitioned) partition by range (period);
create table book_slice_day_default partition of book_slice_day default;
do $$
declare
    p date;
begin
    for p in select period from book loop
        perform ensure_month_partition('book_slice_day', p);
    end loop;
end;
$$;
-- Before the rules' triggers exist: issued months' rows move too.
insert into book_slice_day select * from book_slice_day_unpartitioned;
drop table book_slice_day_unpartitioned;

create trigger book_slice_day_inserted after insert on book_slice_day
    referencing new table as new_rows for each statement execute function book_rows_inserted();
create trigger book_slice_day_removed after delete on book_slice_day
    referencing old table as old_rows for each statement execute function book_rows_removed();
create trigger book_slice_day_updated after update on book_slice_day
    referencing old table as old_rows new table as new_rows
    for each statement execute function book_rows_updated();

-- A month's books go with their rows (0011), deleted from the month's own partition: a join to the
-- removed books would scan every month's.
create or replace function book_removed() returns trigger language plpgsql as $$
declare
    p date;
begin
    for p in select period from old_books loop
        execute format('delete from book_slice_day where period = %L', p);
    end loop;
    delete from book_model_day m using old_books o where m.period = o.period;
    return null;
end;
$$;

create or replace function period_slice_day(p date, from_book boolean) returns setof book_slice_day
language sql stable as $$
    select * from book_slice_day where from_book and period = p
    union all
    select p, k.team_id, coalesce(t.display_name, k.team_id), t.cost_center,
           g.model, s.kind, s.profile, k.rate_card_id, s.slice_id, s.slice_uuid, g.node, k.day,
           k.windows, k.held, k.known, k.active, k.memory,
           s.compute_share, s.memory_share, s.memory_reserved_bytes
    from (
        select u.slice_id, c.team_id, u.rate_card_id, u.day, sum(u.window_count)::int8 as windows,
               sum(u.held_seconds) as held, sum(u.compute_known_seconds) as known,
               sum(u.compute_active_seconds) as active, sum(u.memory_byte_seconds) as memory
        from (
            -- Whole days: the day rollup, each day with the version in force at its start.
            select d.day, d.slice_id, d.consumer_id, m.rate_card_id, d.window_count,
                   d.held_seconds, d.compute_known_seconds, d.compute_active_seconds,
                   d.memory_byte_seconds
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
                   h.window_count, h.held_seconds, h.compute_known_seconds,
                   h.compute_active_seconds, h.memory_byte_seconds
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
    ) k
    join slice s on s.slice_id = k.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    left join team t on t.team_id = k.team_id
    where not from_book
$$;
