-- period_gpu_day: its current definition, applied by `db::migrate` after the migrations (last
-- changed for migrations/0034_books_name_the_month_rollup.sql). Change it here; see docs/architecture.md, Storage.
-- GPU presence and stranded seconds per (GPU, rate card version, day): from the books
-- (`from_book`: each card's days, `book_gpu`), or what the rollups hold now. A whole day's rollup
-- row is already one GPU's day under one rate card version, so it is passed on as it is (grouping
-- the month's GPU-days one by one took four times as long at 10,000 GPUs); days a rate card
-- version starts inside are summed from the hourly rows per version, as `period_model_day` does.
-- The GPU's name, model and geometry are `gpu`'s: join it where they are needed.
create or replace function period_gpu_day(p date, from_book boolean)
returns table (period date, gpu_id integer, rate_card_id bigint, day timestamptz,
               present_seconds numeric, stranded_compute_slice_seconds numeric,
               stranded_memory_slice_seconds numeric, stranded_thread_percent_seconds numeric,
               stranded_memory_byte_seconds numeric)
language sql stable parallel safe as $$
    select b.period, b.gpu_id, b.rate_card_id, x.*
    from book_gpu_days(p) b
    cross join lateral unnest(b.days, b.present_seconds, b.stranded_compute_slice_seconds,
                              b.stranded_memory_slice_seconds, b.stranded_thread_percent_seconds,
                              b.stranded_memory_byte_seconds) as x
    where from_book and b.period = p
    union all
    select p, d.gpu_id, r.rate_card_id, d.day, d.present_seconds,
           d.stranded_compute_slice_seconds, d.stranded_memory_slice_seconds,
           d.stranded_thread_percent_seconds, d.stranded_memory_byte_seconds
    from gpu_daily d
    left join rate_card_span r
           on d.day >= r.effective_from and (r.effective_until is null or d.day < r.effective_until)
    where not from_book
      and d.day >= (p::timestamp at time zone 'UTC')
      and d.day < ((p + interval '1 month') at time zone 'UTC')
      and not exists (select 1 from split_days(p) s(day) where s.day = d.day)
    union all
    select p, h.gpu_id, r.rate_card_id, date_trunc('day', h.hour, 'UTC'), sum(h.present_seconds),
           sum(h.stranded_compute_slice_seconds), sum(h.stranded_memory_slice_seconds),
           sum(h.stranded_thread_percent_seconds), sum(h.stranded_memory_byte_seconds)
    from gpu_hourly h
    left join rate_card_span r
           on h.hour >= r.effective_from and (r.effective_until is null or h.hour < r.effective_until)
    where not from_book
      and h.hour >= (p::timestamp at time zone 'UTC')
      and h.hour < ((p + interval '1 month') at time zone 'UTC')
      and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
    group by h.gpu_id, r.rate_card_id, date_trunc('day', h.hour, 'UTC')
$$;
