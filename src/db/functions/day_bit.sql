-- day_bit: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0022_team_day_rollup.sql). Change it here; see docs/architecture.md, Storage.
-- The bit of a day in its month's `days`.
create or replace function day_bit(d timestamptz) returns integer
language sql immutable parallel safe as $$
    select 1 << (extract(day from d at time zone 'UTC')::int - 1)
$$;
