-- Books that name the month rollup (issue 42).
--
-- 0033 let an invoice run of a month whose rollup covers it copy the month rollup by slice into
-- `book_slice`: 70,000 rows of day arrays at 10,000 GPUs, about 140 MB written again (and kept
-- twice) only so that the books hold their days; 1.7 s of the run's 2.4 s. Now each build of a
-- month's rollups is a version of its own (`usage_month_build`), kept while a book names it, and a
-- run from the rollup writes the books' sums and names only: its book names the build
-- (`book.month_build`), and the days of its rows (`book_slice`, `book_gpu`, arrays left null) are
-- the build's. `book_slice_days` and `book_gpu_days` (src/db/functions/) are where the books'
-- days are read from either way.
--
-- A named build is as frozen as the books that name it: the foreign key keeps its header while a
-- book names it, and a build named by issued books refuses a change to its rows
-- (`month_build_named`). The builder sweeps the builds that are neither a month's current one
-- nor named (`reports::month_rollup::store`).
--
-- Besides the rows by slice, a build keeps each GPU's days (`usage_month_gpu`, `book_gpu`'s rows
-- before they are priced) and the month's presence per model (`usage_month_model_day`,
-- `book_model_day`'s), from `gpu_daily` over the same days.

create table usage_month_build (
    build    bigint generated always as identity primary key,
    month    timestamptz not null check (date_trunc('month', month, 'UTC') = month),
    built_at timestamptz not null default now()
);
create index usage_month_build_month_idx on usage_month_build (month);

-- The rollups built before have no build: they are built again.
delete from usage_month;
delete from usage_month_slice;
delete from usage_month_done;

alter table usage_month_done add column build bigint not null references usage_month_build;

alter table usage_month_slice drop constraint usage_month_slice_pkey;
alter table usage_month_slice
    add column build bigint not null references usage_month_build on delete cascade;
alter table usage_month_slice add primary key (build, team_id, slice_id);
-- The day arrays kept out of the rows (TOAST), so that reading a build's sums reads 10 MB at
-- 10,000 GPUs, not 140.
alter table usage_month_slice set (toast_tuple_target = 128);

create table usage_month_gpu (
    build                           bigint not null references usage_month_build on delete cascade,
    gpu_id                          integer not null,
    days                            timestamptz[] not null,
    present_seconds                 numeric[] not null,
    stranded_compute_slice_seconds  numeric[] not null,
    stranded_memory_slice_seconds   numeric[] not null,
    stranded_thread_percent_seconds numeric[] not null,
    stranded_memory_byte_seconds    numeric[] not null,
    primary key (build, gpu_id),
    check (cardinality(days) > 0
           and cardinality(present_seconds) = cardinality(days)
           and cardinality(stranded_compute_slice_seconds) = cardinality(days)
           and cardinality(stranded_memory_slice_seconds) = cardinality(days)
           and cardinality(stranded_thread_percent_seconds) = cardinality(days)
           and cardinality(stranded_memory_byte_seconds) = cardinality(days))
);

create table usage_month_model_day (
    build                           bigint not null references usage_month_build on delete cascade,
    model                           text not null,
    day                             timestamptz not null,
    present_seconds                 numeric not null,
    memory_bytes                    bigint,
    compute_slices                  smallint,
    memory_slices                   smallint,
    stranded_compute_slice_seconds  numeric not null,
    stranded_memory_slice_seconds   numeric not null,
    stranded_thread_percent_seconds numeric not null,
    stranded_memory_byte_seconds    numeric not null
);
create index usage_month_model_day_idx on usage_month_model_day (build);

-- The build a month's books take their days from; null where their rows hold their own.
alter table book add column month_build bigint references usage_month_build;
create index book_month_build_idx on book (month_build);

alter table book_slice
    alter column days drop not null,
    alter column day_windows drop not null,
    alter column day_held drop not null,
    alter column day_known drop not null,
    alter column day_active drop not null,
    alter column day_memory drop not null,
    drop constraint book_slice_check,
    add constraint book_slice_check check (
        num_nonnulls(days, day_windows, day_held, day_known, day_active, day_memory) = 0
        or (num_nulls(days, day_windows, day_held, day_known, day_active, day_memory) = 0
            and cardinality(days) > 0
            and cardinality(day_windows) = cardinality(days)
            and cardinality(day_held) = cardinality(days)
            and cardinality(day_known) = cardinality(days)
            and cardinality(day_active) = cardinality(days)
            and cardinality(day_memory) = cardinality(days)));

alter table book_gpu
    alter column days drop not null,
    alter column present_seconds drop not null,
    alter column stranded_compute_slice_seconds drop not null,
    alter column stranded_memory_slice_seconds drop not null,
    alter column stranded_thread_percent_seconds drop not null,
    alter column stranded_memory_byte_seconds drop not null,
    add constraint book_gpu_check check (
        num_nonnulls(days, present_seconds, stranded_compute_slice_seconds,
                     stranded_memory_slice_seconds, stranded_thread_percent_seconds,
                     stranded_memory_byte_seconds) = 0
        or (num_nulls(days, present_seconds, stranded_compute_slice_seconds,
                      stranded_memory_slice_seconds, stranded_thread_percent_seconds,
                      stranded_memory_byte_seconds) = 0
            and cardinality(present_seconds) = cardinality(days)
            and cardinality(stranded_compute_slice_seconds) = cardinality(days)
            and cardinality(stranded_memory_slice_seconds) = cardinality(days)
            and cardinality(stranded_thread_percent_seconds) = cardinality(days)
            and cardinality(stranded_memory_byte_seconds) = cardinality(days)));

-- As first defined; its current definition is src/db/functions/month_build_named.sql.
create function month_build_named() returns trigger language plpgsql as $$
declare
    p date;
begin
    select b.period into p from book b where b.month_build = old.build and b.frozen_at is not null;
    if found then
        raise exception 'the month rollup build % is named by the issued books of % and cannot be changed',
            old.build, to_char(p, 'YYYY-MM')
            using errcode = 'check_violation';
    end if;
    return case when tg_op = 'DELETE' then old else new end;
end;
$$;
create trigger usage_month_slice_named before update or delete on usage_month_slice
    for each row execute function month_build_named();
create trigger usage_month_gpu_named before update or delete on usage_month_gpu
    for each row execute function month_build_named();
create trigger usage_month_model_day_named before update or delete on usage_month_model_day
    for each row execute function month_build_named();
