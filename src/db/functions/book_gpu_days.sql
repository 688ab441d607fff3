-- book_gpu_days: its current definition, applied by `db::migrate` after the migrations (last
-- changed for migrations/0036_books_take_their_rows_from_the_build.sql: the card's node). Change it here; see
-- docs/architecture.md, Storage.
-- A month's books of each card's presence with their days: each row's own, or, where the book
-- names a month rollup build (`book.month_build`), the build's. The one place they are read from.
create or replace function book_gpu_days(p date) returns setof book_gpu
language sql stable parallel safe as $$
    select b.period, b.gpu_id, b.rate_card_id, coalesce(b.days, m.days),
           coalesce(b.present_seconds, m.present_seconds),
           coalesce(b.stranded_compute_slice_seconds, m.stranded_compute_slice_seconds),
           coalesce(b.stranded_memory_slice_seconds, m.stranded_memory_slice_seconds),
           coalesce(b.stranded_thread_percent_seconds, m.stranded_thread_percent_seconds),
           coalesce(b.stranded_memory_byte_seconds, m.stranded_memory_byte_seconds), b.node
    from book_gpu b
    join book k on k.period = b.period
    left join usage_month_gpu m on m.build = k.month_build and m.gpu_id = b.gpu_id
    where b.period = p
$$;
