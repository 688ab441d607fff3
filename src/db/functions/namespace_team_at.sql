-- namespace_team_at: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0023_namespace_ownership.sql). Change it here; see docs/architecture.md, Storage.
-- The team that owns `ns` at `at`: `unattributed` when none does.
create or replace function namespace_team_at(ns text, at timestamptz) returns text
language sql stable parallel safe as $$
    select coalesce((select o.team_id from namespace_owner o
                     where o.namespace = ns and o.effective_from <= at
                     order by o.effective_from desc limit 1),
                    'unattributed')
$$;
