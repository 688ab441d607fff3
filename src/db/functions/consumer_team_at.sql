-- consumer_team_at: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0023_namespace_ownership.sql). Change it here; see docs/architecture.md, Storage.
-- The team of a consumer with `label` (its `team` label) and namespace `ns` at `at`.
create or replace function consumer_team_at(label text, ns text, at timestamptz) returns text
language sql stable parallel safe as $$
    select coalesce(label, case when ns is not null then namespace_team_at(ns, at) end,
                    'unattributed')
$$;
