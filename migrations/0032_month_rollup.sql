-- The month rollup (issue 41): the day rollup summed per month, slice and consumer over a month's
-- closed days, so that a team's month by workload (the team page's table and its cost over time)
-- is a read of a row per slice and consumer the team held, not of every day's row of the fleet.
--
-- At 10,000 GPUs a month of `usage_daily` is 2.1 million rows, and it has no key that starts with
-- the team: each team page read them all. A month of this table is about 70,000 rows, read by its
-- key's prefix (month, team).
--
-- Ingest does not write it: the background step that summarises closed days (`plan::days`)
-- builds it from `usage_daily`, from the month's first day up to the first day not summarised
-- (`through`), and records when each of those days was summarised (`seen`). A write to a closed
-- day marks the day stale and the day is summarised again, so a rollup whose days' summaries no
-- longer match what it saw is not read: its month is read from the day rollup until it is built
-- again. The usage report reads it only for a month bucket whose rate card is the same for every
-- day it covers, and reads the days after `through` (today's, a day not summarised) from the day
-- rollup.

create table usage_month (
    month                  timestamptz not null check (date_trunc('month', month, 'UTC') = month),
    team_id                text not null,
    slice_id               integer not null,
    gpu_id                 integer not null,
    consumer_id            bigint not null,
    held_seconds           numeric not null check (held_seconds >= 0),
    memory_byte_seconds    numeric not null check (memory_byte_seconds >= 0),
    compute_active_seconds numeric not null check (compute_active_seconds >= 0),
    compute_known_seconds  numeric not null check (compute_known_seconds >= 0),
    window_count           bigint not null check (window_count >= 0),
    primary key (month, team_id, slice_id, gpu_id, consumer_id)
);

-- The month rollups built: `[month, through)`, each of its days' `summarised_at` as read.
create table usage_month_done (
    month    timestamptz primary key check (date_trunc('month', month, 'UTC') = month),
    through  timestamptz not null check (date_trunc('day', through, 'UTC') = through
                                         and through > month),
    seen     timestamptz[] not null,
    built_at timestamptz not null
);
