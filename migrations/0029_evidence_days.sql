-- Right-sizing's evidence kept per closed UTC day (issue 41): a row per day and evidence group (the
-- team, the consumer's workload, the GPU model, the slice's kind, profile and shares), so that 14
-- days of a team's evidence are 14 x its workloads' rows, not a scan of the days' hourly rollups.
--
-- The percentiles need every hourly value: a row keeps the day's values exactly, the hours' peak
-- memory (`memory_peaks`) and compute-active fractions (`compute_ratios`, the hours whose compute
-- was measured), so that merging days is a concatenation and right-sizing's p99 and p95 are those
-- PostgreSQL's `percentile_disc` and `percentile_cont` give over the hourly rows, to the bit.
-- `slice_ids` keeps the slices held that day, so that a range's slices are counted once.
--
-- Ingest does not write these rows: a bounded background step (`plan::days`) summarises closed
-- days from the hourly rollups, and the day still open is read from them. A write to a closed day
-- (a late batch, a namespace's re-attribution) marks it in `evidence_day_stale`, in the writer's
-- transaction, under a shared advisory lock of the day; the step takes that lock exclusively
-- while it summarises the day, so no write lands between its read and its clearing the mark.

create table evidence_day (
    day                    timestamptz not null check (date_trunc('day', day, 'UTC') = day),
    team_id                text not null,
    namespace              text,
    workload_kind          text not null,
    workload               text not null,
    model                  text not null,
    kind                   text not null,
    profile                text,
    compute_share          numeric not null,
    memory_share           numeric not null,
    memory_reserved_bytes  bigint not null,
    gpu_compute_slices     smallint not null,
    gpu_memory_bytes       bigint not null,
    held_seconds           numeric not null,
    known_seconds          numeric not null,
    compute_active_seconds numeric not null,
    first_hour             timestamptz not null,
    last_hour              timestamptz not null,
    slice_ids              int4[] not null,
    memory_peaks           int8[] not null,
    compute_ratios         float8[] not null
);
-- One row per day and group; the day first, so a day is read (or replaced) by its prefix.
create unique index evidence_day_key on evidence_day (day, team_id, model, kind, namespace,
    workload_kind, workload, profile, compute_share, memory_share, memory_reserved_bytes,
    gpu_compute_slices, gpu_memory_bytes) nulls not distinct;

-- The closed days summarised, and when.
create table evidence_day_done (
    day           timestamptz primary key check (date_trunc('day', day, 'UTC') = day),
    summarised_at timestamptz not null
);

-- Closed days written since they were summarised (or before, never summarised yet): read from the
-- hourly rollups until summarised again.
create table evidence_day_stale (
    day timestamptz primary key check (date_trunc('day', day, 'UTC') = day)
);
