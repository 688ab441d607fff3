-- period_gpu_day: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0028_book_gpu_day.sql). Change it here; see docs/architecture.md, Storage.
-- GPU presence and stranded seconds per (GPU, rate card version, day): from the books
-- (`from_book`), or what the rollups hold now. A whole day's rollup row is already one GPU's day
-- under one rate card version, so it is passed on as it is (grouping the month's GPU-days one by
-- one took four times as long at 10,000 GPUs); days a rate card version starts inside are summed
-- from the hourly rows per version, as `period_model_day` does.
create or replace function period_gpu_day(p date, from_book boolean) returns setof book_gpu_day
language sql stable as $$
    select * from book_gpu_day where from_book and period = p
    union all
    select p, g.gpu_id, g.gpu_uuid, g.model, r.rate_card_id, d.day, g.memory_bytes,
           g.compute_slices, g.memory_slices, d.present_seconds,
           d.stranded_compute_slice_seconds, d.stranded_memory_slice_seconds,
           d.stranded_thread_percent_seconds, d.stranded_memory_byte_seconds
    from gpu_daily d
    join gpu g using (gpu_id)
    left join rate_card_span r
           on d.day >= r.effective_from and (r.effective_until is null or d.day < r.effective_until)
    where not from_book
      and d.day >= (p::timestamp at time zone 'UTC')
      and d.day < ((p + interval '1 month') at time zone 'UTC')
      and d.day not in (select split_days(p))
    union all
    select p, g.gpu_id, g.gpu_uuid, g.model, r.rate_card_id, date_trunc('day', h.hour, 'UTC'),
           g.memory_bytes, g.compute_slices, g.memory_slices, sum(h.present_seconds),
           sum(h.stranded_compute_slice_seconds), sum(h.stranded_memory_slice_seconds),
           sum(h.stranded_thread_percent_seconds), sum(h.stranded_memory_byte_seconds)
    from gpu_hourly h
    join gpu g using (gpu_id)
    left join rate_card_span r
           on h.hour >= r.effective_from and (r.effective_until is null or h.hour < r.effective_until)
    where not from_book
      and h.hour >= (p::timestamp at time zone 'UTC')
      and h.hour < ((p + interval '1 month') at time zone 'UTC')
      and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
    group by g.gpu_id, r.rate_card_id, date_trunc('day', h.hour, 'UTC')
$$;
