-- book_frozen: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0007_books.sql). Change it here; see docs/architecture.md, Storage.
create or replace function book_frozen() returns trigger language plpgsql as $$
begin
    if old.frozen_at is null then
        return case when tg_op = 'DELETE' then old else new end;
    end if;
    if tg_op = 'UPDATE' and new.frozen_at is null and new.period = old.period
       and not exists (select 1 from invoice i where i.period = old.period
                       and i.kind = 'invoice' and i.status = 'issued') then
        return new;
    end if;
    raise exception 'the books of % are issued and cannot be changed', to_char(old.period, 'YYYY-MM')
        using errcode = 'check_violation';
end;
$$;
