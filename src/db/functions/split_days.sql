-- split_days: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0009_day_rollups.sql). Change it here; see docs/architecture.md, Storage.
-- The days of a month that a rate card version starts in, after midnight.
create or replace function split_days(p date) returns setof timestamptz
language sql stable parallel safe as $$
    select distinct date_trunc('day', effective_from, 'UTC') from rate_card
    where effective_from <> date_trunc('day', effective_from, 'UTC')
      and effective_from >= (p::timestamp at time zone 'UTC')
      and effective_from < ((p + interval '1 month') at time zone 'UTC')
$$;
