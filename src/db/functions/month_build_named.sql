-- month_build_named: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0034_books_name_the_month_rollup.sql). Change it here; see
-- docs/architecture.md, Storage.
-- A month rollup build named by issued books is as frozen as they are: its rows refuse a change.
create or replace function month_build_named() returns trigger language plpgsql as $$
declare
    p date;
begin
    select b.period into p from book b where b.month_build = old.build and b.frozen_at is not null;
    if found then
        raise exception 'the month rollup build % is named by the issued books of % and cannot be changed',
            old.build, to_char(p, 'YYYY-MM')
            using errcode = 'check_violation';
    end if;
    return case when tg_op = 'DELETE' then old else new end;
end;
$$;
