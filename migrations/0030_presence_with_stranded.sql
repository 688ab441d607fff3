-- Presence and what the layouts stranded in one read; each card's days as one row (issue 43).
--
-- The monthly report and the invoice run read the month's GPU presence per model and day
-- (`period_model_day`) and, for the fleet-wide split of unallocated capacity, what the GPUs'
-- layouts stranded: two scans of the month's GPU-days. The books' presence rows now keep, per
-- model, day and rate card version, each GPU geometry apart (stranded units are counted in the
-- GPU's slices and bytes) with its stranded seconds, so that one read gives both.
--
-- The books' per-card days (0028's `book_gpu_day`, one row per GPU and day, which the card ledger
-- and the FOCUS split cost allocation of an issued month read) cost the invoice run more than the
-- rest of the split: 300,000 rows at 10,000 GPUs. They become one row per GPU and rate card
-- version with its days as arrays (`book_gpu`), as `book_slice` keeps a slice's days (0021); the
-- GPU's name, model and geometry are read from `gpu`, where they never change.
--
-- Books written before 0028 kept no stranded seconds and no cards' days: their presence rows keep
-- no geometry and count nothing stranded, as before, and they have no `book_gpu` rows. Books
-- written since are rewritten from their per-card days, which hold the same presence per GPU as
-- their presence rows (the same statement wrote both): every month's figures stay as issued.

alter table book_model_day
    add column memory_bytes                    bigint,
    add column compute_slices                  smallint,
    add column memory_slices                   smallint,
    add column stranded_compute_slice_seconds  numeric not null default 0,
    add column stranded_memory_slice_seconds   numeric not null default 0,
    add column stranded_thread_percent_seconds numeric not null default 0,
    add column stranded_memory_byte_seconds    numeric not null default 0;

create table book_gpu (
    period                          date not null,
    gpu_id                          integer not null,
    rate_card_id                    bigint,
    days                            timestamptz[] not null,
    present_seconds                 numeric[] not null,
    stranded_compute_slice_seconds  numeric[] not null,
    stranded_memory_slice_seconds   numeric[] not null,
    stranded_thread_percent_seconds numeric[] not null,
    stranded_memory_byte_seconds    numeric[] not null
);
create index book_gpu_idx on book_gpu (period, gpu_id);

-- Their results changed; `db::migrate` creates them again from src/db/functions/.
drop function period_model_day(date, boolean);
drop function period_gpu_day(date, boolean);

-- Issued books refuse changes (0011); this changes how they are kept, not what they say.
alter table book_model_day disable trigger book_model_day_inserted;
alter table book_model_day disable trigger book_model_day_removed;
delete from book_model_day m where exists (select 1 from book_gpu_day g where g.period = m.period);
insert into book_model_day
select period, model, rate_card_id, day, sum(present_seconds), memory_bytes, compute_slices,
       memory_slices, sum(stranded_compute_slice_seconds), sum(stranded_memory_slice_seconds),
       sum(stranded_thread_percent_seconds), sum(stranded_memory_byte_seconds)
from book_gpu_day
group by period, model, rate_card_id, day, memory_bytes, compute_slices, memory_slices;
alter table book_model_day enable trigger book_model_day_inserted;
alter table book_model_day enable trigger book_model_day_removed;

insert into book_gpu
select period, gpu_id, rate_card_id, array_agg(day order by day), array_agg(present_seconds order by day),
       array_agg(stranded_compute_slice_seconds order by day),
       array_agg(stranded_memory_slice_seconds order by day),
       array_agg(stranded_thread_percent_seconds order by day),
       array_agg(stranded_memory_byte_seconds order by day)
from book_gpu_day
group by period, gpu_id, rate_card_id;
drop table book_gpu_day;

create trigger book_gpu_inserted after insert on book_gpu
    referencing new table as new_rows for each statement execute function book_rows_inserted();
create trigger book_gpu_removed after delete on book_gpu
    referencing old table as old_rows for each statement execute function book_rows_removed();
create trigger book_gpu_updated after update on book_gpu
    referencing old table as old_rows new table as new_rows
    for each statement execute function book_rows_updated();
