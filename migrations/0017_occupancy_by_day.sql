-- Raw windows in a partition per day within their month's (issue 16: ingest speed that holds).
--
-- `occupancy`'s key leads with the slice, so each day's windows land on every slice's newest leaf of
-- the month's index. As the month fills, that index outgrows the buffer pool: at 10,000 GPUs the
-- pages ingest dirtied per checkpoint, each written whole to the WAL after a checkpoint, rose from
-- about 17,000 per two minutes on the month's first day to 105,000 by its eighth, and the leaves read
-- back from outside the buffer pool from 29,000 to 110,000, while the windows per second fell. With a
-- partition per day, a day's windows go to that day's index only, as small on the thirtieth as on
-- the first.
--
-- A month's partition keeps its name (`occupancy_y2026m11`) and is itself partitioned by day
-- (`occupancy_y2026m11d01` ...), so retention still detaches and drops a whole month at once. Months
-- whose partition already exists keep it whole; empty ones of months to come are made again by day.

create or replace function ensure_month_partition(p_parent text, p_month date) returns void
language plpgsql as $$
declare
    first_day date := date_trunc('month', p_month)::date;
    next_day  date := (date_trunc('month', p_month) + interval '1 month')::date;
    part      text := format('%s_y%sm%s', p_parent, to_char(first_day, 'YYYY'), to_char(first_day, 'MM'));
    day       date;
begin
    if p_parent not in ('occupancy', 'gpu_presence', 'usage_hourly', 'gpu_hourly', 'usage_daily',
                        'gpu_daily', 'book_slice_day') then
        raise exception 'ensure_month_partition: % is not a partitioned table of slicemeter', p_parent;
    end if;
    if to_regclass(format('%I.%I', current_schema(), part)) is null then
        perform pg_advisory_xact_lock(hashtext('slicemeter.ensure_month_partition'));
        execute format(
            'create table if not exists %I partition of %I for values from (%L) to (%L) %s',
            part, p_parent, first_day::text || ' 00:00:00+00', next_day::text || ' 00:00:00+00',
            case when p_parent = 'occupancy' then 'partition by range (window_start)' else '' end);
        if p_parent = 'occupancy' then
            day := first_day;
            while day < next_day loop
                execute format(
                    'create table if not exists %I partition of %I for values from (%L) to (%L)',
                    part || 'd' || to_char(day, 'DD'), part,
                    day::text || ' 00:00:00+00', (day + 1)::text || ' 00:00:00+00');
                day := day + 1;
            end loop;
        end if;
    end if;
end;
$$;

do $$
declare
    child text;
    month date;
    empty boolean;
begin
    for child in
        select c.relname
        from pg_inherits i
        join pg_class c on c.oid = i.inhrelid
        join pg_class p on p.oid = i.inhparent
        join pg_namespace n on n.oid = p.relnamespace
        where p.relname = 'occupancy' and n.nspname = current_schema() and c.relkind = 'r'
    loop
        month := to_date(substring(child from '_y(\d{4}m\d{2})$'), 'YYYY"m"MM');
        continue when month is null or month <= date_trunc('month', now())::date;
        execute format('select not exists (select from %I)', child) into empty;
        continue when not empty;
        execute format('drop table %I', child);
        perform ensure_month_partition('occupancy', month);
    end loop;
end;
$$;
