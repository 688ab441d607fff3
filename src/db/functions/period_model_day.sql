-- period_model_day: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0030_presence_with_stranded.sql). Change it here; see docs/architecture.md, Storage.
-- GPU presence per (model, GPU geometry, rate card version, day), with what the GPUs' layouts
-- stranded: from the books (`from_book`), or what the rollups hold now. One scan of the month's
-- GPU-days gives both the fleet's cost and the stranded part of its unallocated capacity. Whole
-- days are summed per model, geometry and day first and given their rate card version after (a
-- version covers a whole day); days a version starts inside are summed from the hourly rows per
-- version. Parallel safe, and those days left out by an anti-join (a hashed `not in` kept the scan in
-- one process), so that PostgreSQL may read the month's GPU-days with parallel workers.
create or replace function period_model_day(p date, from_book boolean) returns setof book_model_day
language sql stable parallel safe as $$
    select * from book_model_day where from_book and period = p
    union all
    select p, d.model, r.rate_card_id, d.day, d.present_seconds, d.memory_bytes,
           d.compute_slices, d.memory_slices, d.compute_slice_seconds, d.memory_slice_seconds,
           d.thread_percent_seconds, d.memory_byte_seconds
    from (
        select g.model, g.memory_bytes, g.compute_slices, g.memory_slices, d.day,
               sum(d.present_seconds) as present_seconds,
               sum(d.stranded_compute_slice_seconds) as compute_slice_seconds,
               sum(d.stranded_memory_slice_seconds) as memory_slice_seconds,
               sum(d.stranded_thread_percent_seconds) as thread_percent_seconds,
               sum(d.stranded_memory_byte_seconds) as memory_byte_seconds
        from gpu_daily d
        join gpu g using (gpu_id)
        where not from_book
          and d.day >= (p::timestamp at time zone 'UTC')
          and d.day < ((p + interval '1 month') at time zone 'UTC')
          and not exists (select 1 from split_days(p) s(day) where s.day = d.day)
        group by g.model, g.memory_bytes, g.compute_slices, g.memory_slices, d.day
    ) d
    left join rate_card_span r
           on d.day >= r.effective_from and (r.effective_until is null or d.day < r.effective_until)
    union all
    select p, g.model, r.rate_card_id, date_trunc('day', h.hour, 'UTC'), sum(h.present_seconds),
           g.memory_bytes, g.compute_slices, g.memory_slices,
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
    group by g.model, g.memory_bytes, g.compute_slices, g.memory_slices, r.rate_card_id,
             date_trunc('day', h.hour, 'UTC')
$$;
