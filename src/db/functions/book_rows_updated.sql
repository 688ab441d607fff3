-- book_rows_updated: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0011_books_checked_per_statement.sql). Change it here; see docs/architecture.md, Storage.
-- An update is a removal of the old rows and an insertion of the new.
create or replace function book_rows_updated() returns trigger language plpgsql as $$
begin
    perform book_periods_not_issued(array(select distinct period from old_rows));
    perform book_periods_writable(array(select distinct period from new_rows), tg_table_name, 'update');
    return null;
end;
$$;
