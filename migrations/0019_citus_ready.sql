-- A schema ready to be spread over a Citus cluster (issue 12, item 7). Citus is not packaged here;
-- the README's "Past one PostgreSQL" gives the commands that distribute these tables, and
-- `tests/api/schema.rs` checks from the catalog that this schema keeps Citus's rules:
--
-- 1. The tables that grow with the fleet are distributed by the GPU (`gpu_id`, one-to-one with the
--    GPU's uuid), so one GPU's raw windows, presence and rollups live on one shard. Every primary
--    and unique key of those tables must include `gpu_id`: a key without it would need a check
--    across shards, which Citus does not do. `occupancy`, `usage_hourly` and `usage_daily` were
--    keyed by slice and so far had no GPU column: they get it (a slice never moves to another GPU,
--    so each row's GPU is its slice's), and their keys take it right after the slice. Uniqueness
--    and the keys' order are unchanged, since the slice determines the GPU; and there the 4-byte
--    GPU id fills the alignment padding after the 4-byte slice id, so the keys' index entries stay
--    as wide as they were.
-- 2. Citus distributes a partitioned table whose partitions are plain tables, one level deep
--    (citusdata/citus#4911). 0017 made each month of `occupancy` a partition that is itself
--    partitioned by day. Its days now hang from `occupancy` directly, under the same names
--    (`occupancy_y2026m11d03`), so a day's windows still go to an index the size of a day.
--    Retention drops a month by detaching its days; months kept whole from before 0017 stay as
--    they are.
-- 3. A month's books are removed with their rows by the invoice run itself (`billing::store`),
--    not by a trigger on `book`: under Citus, a trigger on a reference table cannot write to a
--    distributed one.

alter table occupancy drop constraint occupancy_pkey;
alter table occupancy add column gpu_id integer;
update occupancy o set gpu_id = s.gpu_id from slice s where s.slice_id = o.slice_id;
alter table occupancy alter column gpu_id set not null;

do $$
declare
    month  record;
    day    record;
    days   text[];
    bounds text[];
    i      integer;
begin
    for month in
        select c.relname
        from pg_inherits h
        join pg_class c on c.oid = h.inhrelid
        join pg_class p on p.oid = h.inhparent
        join pg_namespace n on n.oid = p.relnamespace
        where p.relname = 'occupancy' and n.nspname = current_schema() and c.relkind = 'p'
    loop
        days := '{}';
        bounds := '{}';
        for day in
            select c.relname, pg_get_expr(c.relpartbound, c.oid) as bound
            from pg_inherits h
            join pg_class c on c.oid = h.inhrelid
            where h.inhparent = format('%I.%I', current_schema(), month.relname)::regclass
        loop
            execute format('alter table %I detach partition %I', month.relname, day.relname);
            days := days || day.relname::text;
            bounds := bounds || day.bound;
        end loop;
        execute format('alter table occupancy detach partition %I', month.relname);
        execute format('drop table %I', month.relname);
        for i in 1 .. coalesce(array_length(days, 1), 0) loop
            execute format('alter table occupancy attach partition %I %s', days[i], bounds[i]);
        end loop;
    end loop;
end;
$$;

alter table occupancy add primary key (slice_id, gpu_id, window_start, consumer_id);

alter table usage_hourly drop constraint usage_hourly_pkey;
alter table usage_hourly add column gpu_id integer;
update usage_hourly u set gpu_id = s.gpu_id from slice s where s.slice_id = u.slice_id;
alter table usage_hourly alter column gpu_id set not null;
alter table usage_hourly add primary key (hour, slice_id, gpu_id, consumer_id);

alter table usage_daily drop constraint usage_daily_pkey;
alter table usage_daily add column gpu_id integer;
update usage_daily u set gpu_id = s.gpu_id from slice s where s.slice_id = u.slice_id;
alter table usage_daily alter column gpu_id set not null;
alter table usage_daily add primary key (day, slice_id, gpu_id, consumer_id);

-- As in 0017, but a month of `occupancy` is its days, each a partition of `occupancy` itself. A
-- month already there whole (made before 0017) is left whole.
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
    if to_regclass(format('%I.%I', current_schema(), part)) is not null then
        return;
    end if;
    if p_parent <> 'occupancy' then
        perform pg_advisory_xact_lock(hashtext('slicemeter.ensure_month_partition'));
        execute format(
            'create table if not exists %I partition of %I for values from (%L) to (%L)',
            part, p_parent, first_day::text || ' 00:00:00+00', next_day::text || ' 00:00:00+00');
        return;
    end if;
    -- The month's last day is made last, in the same transaction: when it is there, all are.
    if to_regclass(format('%I.%I', current_schema(), part || 'd' || to_char(next_day - 1, 'DD'))) is not null then
        return;
    end if;
    perform pg_advisory_xact_lock(hashtext('slicemeter.ensure_month_partition'));
    day := first_day;
    while day < next_day loop
        execute format(
            'create table if not exists %I partition of occupancy for values from (%L) to (%L)',
            part || 'd' || to_char(day, 'DD'), day::text || ' 00:00:00+00', (day + 1)::text || ' 00:00:00+00');
        day := day + 1;
    end loop;
end;
$$;

-- As in 0008, but a month of raw windows may be its days (`occupancy_y2026m11d03`).
create or replace function drop_raw_partitions_before(p_cutoff date) returns setof text
language plpgsql as $$
declare
    parent text;
    child  text;
    month  date;
begin
    foreach parent in array array['occupancy', 'gpu_presence'] loop
        for child in
            select c.relname
            from pg_inherits i
            join pg_class c on c.oid = i.inhrelid
            join pg_class p on p.oid = i.inhparent
            join pg_namespace n on n.oid = p.relnamespace
            where p.relname = parent and n.nspname = current_schema()
            order by c.relname
        loop
            month := to_date(substring(child from '_y(\d{4}m\d{2})(d\d{2})?$'), 'YYYY"m"MM');
            if month is not null and month < date_trunc('month', p_cutoff)::date then
                execute format('alter table %I detach partition %I', parent, child);
                execute format('drop table %I', child);
                return next child;
            end if;
        end loop;
    end loop;
end;
$$;

drop trigger book_removed on book;
drop function book_removed();
