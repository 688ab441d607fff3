-- book_periods_not_issued: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0011_books_checked_per_statement.sql). Change it here; see docs/architecture.md, Storage.
-- Raises unless every period named is not an issued book (removed rows: their book may be gone).
create or replace function book_periods_not_issued(periods date[]) returns void
language plpgsql as $$
declare
    p date;
begin
    select b.period into p
    from unnest(periods) as x(period) join book b using (period)
    where b.frozen_at is not null
    limit 1;
    if found then
        raise exception 'the books of % are issued and cannot be changed', to_char(p, 'YYYY-MM')
            using errcode = 'check_violation';
    end if;
end;
$$;
