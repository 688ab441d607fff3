-- period_slice_day: its current definition, applied by `db::migrate` after the migrations (last
-- changed for migrations/0034_books_name_the_month_rollup.sql). Change it here; see docs/architecture.md, Storage.
-- A month's usage per (team, slice, rate card version, day), named: from its books, unnested, or
-- from the rollups, with the names and shares of now.
create or replace function period_slice_day(p date, from_book boolean)
returns table (period date, team_id text, team_name text, cost_center text, model text,
               kind text, profile text, rate_card_id bigint, slice_id integer, slice_uuid text,
               node text, day timestamptz, windows bigint, held_seconds numeric,
               known_seconds numeric, active_seconds numeric, memory_byte_seconds numeric,
               compute_share numeric, memory_share numeric, memory_reserved_bytes bigint)
language sql stable as $$
    select b.period, b.team_id, b.team_name, b.cost_center, b.model, b.kind, b.profile,
           b.rate_card_id, b.slice_id, b.slice_uuid, b.node, d.day, d.windows, d.held, d.known,
           d.active, d.memory, b.compute_share, b.memory_share, b.memory_reserved_bytes
    from book_slice_days(p) b
    cross join lateral unnest(b.days, b.day_windows, b.day_held, b.day_known, b.day_active,
                              b.day_memory) as d(day, windows, held, known, active, memory)
    where from_book and b.period = p
    union all
    select p, k.team_id, coalesce(t.display_name, k.team_id), t.cost_center,
           g.model, s.kind, s.profile, k.rate_card_id, s.slice_id, s.slice_uuid, g.node, k.day,
           k.windows, k.held, k.known, k.active, k.memory,
           s.compute_share, s.memory_share, s.memory_reserved_bytes
    from period_slice_keys(p) k
    join slice s on s.slice_id = k.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    left join team t on t.team_id = k.team_id
    where not from_book
$$;
