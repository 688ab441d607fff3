-- book_slice_days: its current definition, applied by `db::migrate` after the migrations (last
-- changed for migrations/0036_books_take_their_rows_from_the_build.sql). Change it here; see
-- docs/architecture.md, Storage.
-- A month's books of usage with their days, the one place the books' rows are read from: the
-- rows the books hold, each with its own days or, where the book names a month rollup build
-- (`book.month_build`: a run from 0034 took the rows from it), the build's; and the rows of books
-- that hold none of their own, taken from their build (`book_slice_built`).
create or replace function book_slice_days(p date) returns setof book_slice
language sql stable parallel restricted as $$
    select b.period, b.team_id, b.team_name, b.cost_center, b.model, b.kind, b.profile,
           b.rate_card_id, b.slice_id, b.slice_uuid, b.node, b.compute_share, b.memory_share,
           b.memory_reserved_bytes, b.windows, b.first_day, b.held_seconds, b.known_seconds,
           b.active_seconds, b.memory_byte_seconds,
           coalesce(b.days, m.days), coalesce(b.day_windows, m.day_windows),
           coalesce(b.day_held, m.day_held), coalesce(b.day_known, m.day_known),
           coalesce(b.day_active, m.day_active), coalesce(b.day_memory, m.day_memory)
    from book_slice b
    join book k on k.period = b.period
    left join usage_month_slice m
           on m.build = k.month_build and m.team_id = b.team_id and m.slice_id = b.slice_id
    where b.period = p
    union all
    select * from book_slice_built(p)
$$;
