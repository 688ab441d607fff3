-- drop_raw_partitions_before: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0019_citus_ready.sql). Change it here; see docs/architecture.md, Storage.
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
