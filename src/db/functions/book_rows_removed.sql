-- book_rows_removed: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0011_books_checked_per_statement.sql). Change it here; see docs/architecture.md, Storage.
create or replace function book_rows_removed() returns trigger language plpgsql as $$
begin
    perform book_periods_not_issued(array(select distinct period from old_rows));
    return null;
end;
$$;
