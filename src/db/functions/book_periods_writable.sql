-- book_periods_writable: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0011_books_checked_per_statement.sql). Change it here; see docs/architecture.md, Storage.
-- Raises unless every period named is a book that is not issued (`op`: what the statement did,
-- for the message).
create or replace function book_periods_writable(periods date[], tbl text, op text) returns void
language plpgsql as $$
declare
    p date;
begin
    select x.period into p
    from unnest(periods) as x(period) left join book b using (period)
    where b.period is null
    limit 1;
    if found then
        raise exception '% on table "%" names period %, which has no books', op, tbl, p
            using errcode = 'foreign_key_violation';
    end if;
    perform book_periods_not_issued(periods);
end;
$$;
