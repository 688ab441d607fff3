-- month_rollups_valid: its current definition, applied by `db::migrate` after the migrations
-- (first defined for migrations/0033_month_rollup_by_slice.sql). Change it here; see
-- docs/architecture.md, Storage.
-- The month rollups (`usage_month`, and the current build's `usage_month_slice`, `usage_month_gpu`
-- and `usage_month_model_day`) within `[lo, hi)` that may be read: those
-- whose days are summarised as they were when it was built (`seen`), none of them stale since,
-- and all under one rate card version. The usage report and the invoice run's books read a
-- rollup only while it is here.
create or replace function month_rollups_valid(lo timestamptz, hi timestamptz)
returns table (month timestamptz, through timestamptz)
language sql stable as $$
    select m.month, m.through
    from usage_month_done m
    where m.month >= lo and m.through <= hi
      and m.seen = array(select d.summarised_at from evidence_day_done d
                         where d.day >= m.month and d.day < m.through
                         order by d.day)
      and not exists (select from evidence_day_stale s
                      where s.day >= m.month and s.day < m.through)
      and not exists (select from rate_card r
                      where r.effective_from > m.month and r.effective_from < m.through)
$$;
