-- book_slice_built: its current definition, applied by `db::migrate` after the migrations (first
-- defined for migrations/0036_books_take_their_rows_from_the_build.sql). Change it here; see
-- docs/architecture.md, Storage.
-- A month's books of usage where its run took them from the month rollup's build: the build's
-- rows per team and slice, each with the names its books froze (the team's in `book_team`, the
-- node in the card's `book_gpu` row) and those that cannot change (the slice's, the GPU's
-- model). Books that hold rows of their own have no `book_team` rows, and give none here.
-- Hash joins whatever the statistics say: the books it reads were often written a moment ago,
-- and a plan from a fleet of empty books loops over every team per card (70,000 rows at 10,000
-- GPUs read in 1 s instead of 0.15 s).
create or replace function book_slice_built(p date) returns setof book_slice
language sql stable parallel restricted rows 100000 set enable_nestloop = off as $$
    select k.period, m.team_id, t.team_name, t.cost_center, g.model, s.kind, s.profile,
           c.rate_card_id, s.slice_id, s.slice_uuid, c.node, s.compute_share, s.memory_share,
           s.memory_reserved_bytes, m.windows, m.first_day, m.held_seconds, m.known_seconds,
           m.active_seconds, m.memory_byte_seconds, m.days, m.day_windows, m.day_held,
           m.day_known, m.day_active, m.day_memory
    from book k
    join usage_month_slice m on m.build = k.month_build
    join book_team t on t.period = k.period and t.team_id = m.team_id
    join slice s on s.slice_id = m.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    join book_gpu c on c.period = k.period and c.gpu_id = s.gpu_id
    where k.period = p
$$;
