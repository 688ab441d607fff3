-- ensure_month_partition: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0019_citus_ready.sql). Change it here; see docs/architecture.md, Storage.
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
