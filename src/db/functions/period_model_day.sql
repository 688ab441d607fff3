-- period_model_day: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0009_day_rollups.sql). Change it here; see docs/architecture.md, Storage.
create or replace function period_model_day(p date, from_book boolean) returns setof book_model_day
language sql stable as $$
    select * from book_model_day where from_book and period = p
    union all
    select p, g.model, r.rate_card_id, h.day, sum(h.present_seconds)
    from (
        select d.day, d.day as at, d.gpu_id, d.present_seconds
        from gpu_daily d
        where d.day >= (p::timestamp at time zone 'UTC')
          and d.day < ((p + interval '1 month') at time zone 'UTC')
          and d.day not in (select split_days(p))
        union all
        select date_trunc('day', h.hour, 'UTC'), h.hour, h.gpu_id, h.present_seconds
        from gpu_hourly h
        where h.hour >= (p::timestamp at time zone 'UTC')
          and h.hour < ((p + interval '1 month') at time zone 'UTC')
          and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
    ) h
    join gpu g using (gpu_id)
    left join rate_card_span r
           on h.at >= r.effective_from and (r.effective_until is null or h.at < r.effective_until)
    where not from_book
    group by g.model, r.rate_card_id, h.day
$$;
