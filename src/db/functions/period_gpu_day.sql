-- period_gpu_day: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0028_book_gpu_day.sql). Change it here; see docs/architecture.md, Storage.
-- GPU presence and stranded seconds per (GPU, rate card version, day): from the books
-- (`from_book`), or what the rollups hold now (days a rate card version starts inside read from the
-- hourly rows, as `period_model_day` does).
create or replace function period_gpu_day(p date, from_book boolean) returns setof book_gpu_day
language sql stable as $$
    select * from book_gpu_day where from_book and period = p
    union all
    select p, g.gpu_id, g.gpu_uuid, g.model, r.rate_card_id, h.day, g.memory_bytes,
           g.compute_slices, g.memory_slices, sum(h.present_seconds),
           sum(h.stranded_compute_slice_seconds), sum(h.stranded_memory_slice_seconds),
           sum(h.stranded_thread_percent_seconds), sum(h.stranded_memory_byte_seconds)
    from (
        select d.day, d.day as at, d.gpu_id, d.present_seconds, d.stranded_compute_slice_seconds,
               d.stranded_memory_slice_seconds, d.stranded_thread_percent_seconds,
               d.stranded_memory_byte_seconds
        from gpu_daily d
        where d.day >= (p::timestamp at time zone 'UTC')
          and d.day < ((p + interval '1 month') at time zone 'UTC')
          and d.day not in (select split_days(p))
        union all
        select date_trunc('day', h.hour, 'UTC'), h.hour, h.gpu_id, h.present_seconds,
               h.stranded_compute_slice_seconds, h.stranded_memory_slice_seconds,
               h.stranded_thread_percent_seconds, h.stranded_memory_byte_seconds
        from gpu_hourly h
        where h.hour >= (p::timestamp at time zone 'UTC')
          and h.hour < ((p + interval '1 month') at time zone 'UTC')
          and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
    ) h
    join gpu g using (gpu_id)
    left join rate_card_span r
           on h.at >= r.effective_from and (r.effective_until is null or h.at < r.effective_until)
    where not from_book
    group by g.gpu_id, r.rate_card_id, h.day
$$;
