-- A month's presence per GPU and day in its books, with what the GPU's layout stranded (issue 43).
--
-- Stranded capacity (0025) is priced apart from placeable capacity in the conservation block, and a
-- card's ledger accounts for each card's cost. An issued month answers both from its books, which
-- until now kept presence per model and day only (`book_model_day`): this keeps it per GPU, with the
-- GPU's geometry (the stranded units are counted in its slices, percent and bytes) and its stranded
-- seconds, written by the same invoice run in the same statement. Books written before this
-- migration have no rows here: their months count nothing stranded, as the rollups of 0025 did.
--
-- The books' rules (0011) hold for it as for the others.

create table book_gpu_day (
    period                          date not null,
    gpu_id                          integer not null,
    gpu_uuid                        text not null,
    model                           text not null,
    rate_card_id                    bigint,
    day                             timestamptz not null,
    memory_bytes                    bigint not null,
    compute_slices                  smallint not null,
    memory_slices                   smallint not null,
    present_seconds                 numeric not null,
    stranded_compute_slice_seconds  numeric not null,
    stranded_memory_slice_seconds   numeric not null,
    stranded_thread_percent_seconds numeric not null,
    stranded_memory_byte_seconds    numeric not null
);
create index book_gpu_day_idx on book_gpu_day (period, gpu_id, day);

create trigger book_gpu_day_inserted after insert on book_gpu_day
    referencing new table as new_rows for each statement execute function book_rows_inserted();
create trigger book_gpu_day_removed after delete on book_gpu_day
    referencing old table as old_rows for each statement execute function book_rows_removed();
create trigger book_gpu_day_updated after update on book_gpu_day
    referencing old table as old_rows new table as new_rows
    for each statement execute function book_rows_updated();

-- GPU presence and stranded seconds per (GPU, rate card version, day): from the books
-- (`from_book`), or what the rollups hold now (days a rate card version starts inside read from the
-- hourly rows, as `period_model_day` does).
create function period_gpu_day(p date, from_book boolean) returns setof book_gpu_day
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
