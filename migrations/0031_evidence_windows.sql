-- Right-sizing's evidence kept per window of closed days (issue 41): the team page reads a month's
-- and right-sizing's last days' evidence of every workload of a team. From the day summaries
-- (0029) that is every day's row of every workload with every hourly value (a large team's month:
-- 262,500 rows, 13 million values); from a window it is a row per workload.
--
-- A window's row keeps the sums, the hours and the slices as a day's row does, but of its
-- percentiles' values only the largest: p99 of memory and p95 of compute are the values at a
-- position counted from the top, so the largest values and how many there were in all
-- (`memory_count`, `compute_count`) give them exactly, as long as the range read adds few enough
-- values of its own (today's hours, a part day) that the position stays among those kept; when it
-- does not, the read takes the days' summaries instead. The percentiles stay PostgreSQL's to the
-- bit: no sketch, no error.
--
-- `seen` is when each of the window's days was summarised, in day order, as the window was built
-- from them: a day summarised again since (a late write) no longer matches, and the window is not
-- read until it is built again.

create table evidence_window (
    first_day              timestamptz not null,
    last_day               timestamptz not null,
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
    memory_count           bigint not null check (memory_count >= 0),
    memory_top             int8[] not null,
    compute_count          bigint not null check (compute_count >= 0),
    compute_top            float8[] not null,
    check (first_day < last_day),
    check (cardinality(memory_top) <= memory_count and cardinality(compute_top) <= compute_count)
);
create index evidence_window_key on evidence_window (first_day, last_day, team_id);

-- The windows built: `[first_day, last_day)`, each of its days' `summarised_at` as read.
create table evidence_window_done (
    first_day timestamptz not null check (date_trunc('day', first_day, 'UTC') = first_day),
    last_day  timestamptz not null check (date_trunc('day', last_day, 'UTC') = last_day),
    seen      timestamptz[] not null,
    built_at  timestamptz not null,
    primary key (first_day, last_day)
);
