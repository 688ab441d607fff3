-- Day rollups (README, Storage): the hourly rollups summed per UTC day, written by ingest in the
-- same transaction as the hourly ones. Months are billed, reported and exported from them, 24 times
-- fewer rows than the hourly rollups; only a day on which a rate card version starts after midnight
-- (its hours priced under two versions) is still read from the hourly rows.

create table usage_daily (
    day                    timestamptz not null,
    slice_id               integer not null,
    consumer_id            bigint not null,
    held_seconds           numeric not null check (held_seconds >= 0 and held_seconds <= 86400),
    memory_byte_seconds    numeric not null check (memory_byte_seconds >= 0),
    memory_peak_bytes      bigint not null check (memory_peak_bytes >= 0),
    compute_active_seconds numeric not null check (compute_active_seconds >= 0),
    compute_known_seconds  numeric not null check (compute_known_seconds >= 0),
    -- The day's hourly window counts summed: each window once, in the hour it starts.
    window_count           integer not null check (window_count >= 0),
    primary key (day, slice_id, consumer_id),
    check (date_trunc('day', day, 'UTC') = day),
    check (compute_known_seconds <= held_seconds and compute_active_seconds <= compute_known_seconds)
) partition by range (day);

create table gpu_daily (
    day             timestamptz not null,
    gpu_id          integer not null,
    present_seconds numeric not null check (present_seconds > 0 and present_seconds <= 86400),
    primary key (day, gpu_id),
    check (date_trunc('day', day, 'UTC') = day)
) partition by range (day);

create or replace function ensure_month_partition(p_parent text, p_month date) returns void
language plpgsql as $$
declare
    first_day date := date_trunc('month', p_month)::date;
    next_day  date := (date_trunc('month', p_month) + interval '1 month')::date;
    part      text := format('%s_y%sm%s', p_parent, to_char(first_day, 'YYYY'), to_char(first_day, 'MM'));
begin
    if p_parent not in ('occupancy', 'gpu_presence', 'usage_hourly', 'gpu_hourly', 'usage_daily',
                        'gpu_daily') then
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

-- What is already stored, summed once.
do $$
declare
    m date;
begin
    for m in
        select distinct (date_trunc('month', hour, 'UTC') at time zone 'UTC')::date from usage_hourly
        union
        select distinct (date_trunc('month', hour, 'UTC') at time zone 'UTC')::date from gpu_hourly
    loop
        perform ensure_month_partition('usage_daily', m);
        perform ensure_month_partition('gpu_daily', m);
    end loop;
end;
$$;
insert into usage_daily
select date_trunc('day', hour, 'UTC'), slice_id, consumer_id, sum(held_seconds),
       sum(memory_byte_seconds), max(memory_peak_bytes), sum(compute_active_seconds),
       sum(compute_known_seconds), sum(window_count)
from usage_hourly
group by 1, 2, 3;
insert into gpu_daily
select date_trunc('day', hour, 'UTC'), gpu_id, sum(present_seconds)
from gpu_hourly
group by 1, 2;

-- The days of a month that a rate card version starts in, after midnight.
create function split_days(p date) returns setof timestamptz
language sql stable as $$
    select distinct date_trunc('day', effective_from, 'UTC') from rate_card
    where effective_from <> date_trunc('day', effective_from, 'UTC')
      and effective_from >= (p::timestamp at time zone 'UTC')
      and effective_from < ((p + interval '1 month') at time zone 'UTC')
$$;

-- As in 0007, but from the day rollups, and from the hourly ones on split days only.
create or replace function period_slice_day(p date, from_book boolean) returns setof book_slice_day
language sql stable as $$
    select * from book_slice_day where from_book and period = p
    union all
    select p, c.team_id, coalesce(t.display_name, c.team_id), t.cost_center,
           g.model, s.kind, s.profile, r.rate_card_id, s.slice_id, s.slice_uuid, g.node,
           u.day,
           sum(u.window_count)::int8, sum(u.held_seconds), sum(u.compute_known_seconds),
           sum(u.compute_active_seconds), sum(u.memory_byte_seconds),
           s.compute_share, s.memory_share, s.memory_reserved_bytes
    from (
        select d.day, d.day as at, d.slice_id, d.consumer_id, d.window_count, d.held_seconds,
               d.compute_known_seconds, d.compute_active_seconds, d.memory_byte_seconds
        from usage_daily d
        where d.day >= (p::timestamp at time zone 'UTC')
          and d.day < ((p + interval '1 month') at time zone 'UTC')
          and d.day not in (select split_days(p))
        union all
        select date_trunc('day', h.hour, 'UTC'), h.hour, h.slice_id, h.consumer_id, h.window_count,
               h.held_seconds, h.compute_known_seconds, h.compute_active_seconds,
               h.memory_byte_seconds
        from usage_hourly h
        where h.hour >= (p::timestamp at time zone 'UTC')
          and h.hour < ((p + interval '1 month') at time zone 'UTC')
          and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
    ) u
    join consumer c using (consumer_id)
    left join team t on t.team_id = c.team_id
    join slice s using (slice_id)
    join gpu g using (gpu_id)
    left join rate_card_span r
           on u.at >= r.effective_from and (r.effective_until is null or u.at < r.effective_until)
    where not from_book
    group by c.team_id, t.display_name, t.cost_center, g.model, s.kind, s.profile, r.rate_card_id,
             s.slice_id, g.node, u.day
$$;

create or replace function period_model_day(p date, from_book boolean) returns setof book_model_day
language sql stable as $$
    select * from book_model_day where from_book and period = p
    union all
    select p, g.model, r.rate_card_id, h.day, sum(h.present_seconds)
    from (
        select d.day, d.day as at, d.gpu_id, d.present_seconds
        from gpu_daily d
        where d.day >= (p::timestamp at time zone 'UTC')
          and d.day < ((p + interval '1 month') at time zone 'UTC')
          and d.day not in (select split_days(p))
        union all
        select date_trunc('day', h.hour, 'UTC'), h.hour, h.gpu_id, h.present_seconds
        from gpu_hourly h
        where h.hour >= (p::timestamp at time zone 'UTC')
          and h.hour < ((p + interval '1 month') at time zone 'UTC')
          and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
    ) h
    join gpu g using (gpu_id)
    left join rate_card_span r
           on h.at >= r.effective_from and (r.effective_until is null or h.at < r.effective_until)
    where not from_book
    group by g.model, r.rate_card_id, h.day
$$;
