-- period_slice_keys: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0023_namespace_ownership.sql). Change it here; see docs/architecture.md, Storage.
create or replace function period_slice_keys(p date)
returns table (slice_id integer, team_id text, rate_card_id bigint, day timestamptz,
               windows bigint, held numeric, known numeric, active numeric, memory numeric)
language sql stable as $$
    select u.slice_id, u.team_id, u.rate_card_id, u.day, sum(u.windows)::int8, sum(u.held),
           sum(u.known), sum(u.active), sum(u.memory)
    from period_usage_days(p) u
    group by u.slice_id, u.team_id, u.rate_card_id, u.day
$$;
