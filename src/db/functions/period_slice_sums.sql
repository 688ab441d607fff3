-- period_slice_sums: its current definition, applied by `db::migrate` after the migrations (last
-- changed for migrations/0036_books_take_their_rows_from_the_build.sql: the books read through
-- `book_slice_days`). Change it here; see docs/architecture.md, Storage.
create or replace function period_slice_sums(p date, from_book boolean)
returns table (team_id text, model text, kind text, profile text, rate_card_id bigint,
               slice_id integer, compute_share numeric, memory_share numeric,
               memory_reserved_bytes bigint, windows bigint, first_day timestamptz,
               held_seconds numeric, known_seconds numeric, active_seconds numeric,
               memory_byte_seconds numeric)
language sql stable as $$
    select b.team_id, b.model, b.kind, b.profile, b.rate_card_id, b.slice_id, b.compute_share,
           b.memory_share, b.memory_reserved_bytes, b.windows, b.first_day, b.held_seconds,
           b.known_seconds, b.active_seconds, b.memory_byte_seconds
    from book_slice_days(p) b
    where from_book
    union all
    select u.team_id, g.model, s.kind, s.profile, u.rate_card_id, s.slice_id, s.compute_share,
           s.memory_share, s.memory_reserved_bytes, sum(u.windows)::int8, min(u.day),
           sum(u.held), sum(u.known), sum(u.active), sum(u.memory)
    from period_usage_days(p) u
    join slice s using (slice_id)
    join gpu g using (gpu_id)
    where not from_book
    group by u.team_id, g.model, s.kind, s.profile, u.rate_card_id, s.slice_id, s.compute_share,
             s.memory_share, s.memory_reserved_bytes
$$;
