-- book_rows_inserted: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0011_books_checked_per_statement.sql). Change it here; see docs/architecture.md, Storage.
create or replace function book_rows_inserted() returns trigger language plpgsql as $$
begin
    perform book_periods_writable(array(select distinct period from new_rows), tg_table_name, 'insert');
    return null;
end;
$$;
