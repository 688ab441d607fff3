-- The month rollup by slice (issue 42): the day rollup of a month's closed days per team and
-- slice, with the days as arrays, as the books keep them (`book_slice`, migration 0021: a day
-- once per consumer of the team), so that an invoice run of a month whose rollup covers all its
-- days writes the books from a row per team and slice (70,000 at 10,000 GPUs) instead of grouping
-- the month's 2.1 million day rows into arrays, which took 2.1 s of the run's 3.3 s.
--
-- It is built with `usage_month` (0032), in the same transaction and over the same days, and is
-- read only while `usage_month_done` says both are as their days are summarised now
-- (`month_rollups_valid`, src/db/functions/).

create table usage_month_slice (
    month               timestamptz not null check (date_trunc('month', month, 'UTC') = month),
    team_id             text not null,
    slice_id            integer not null,
    windows             bigint not null check (windows >= 0),
    first_day           timestamptz not null,
    held_seconds        numeric not null check (held_seconds >= 0),
    known_seconds       numeric not null check (known_seconds >= 0),
    active_seconds      numeric not null check (active_seconds >= 0),
    memory_byte_seconds numeric not null check (memory_byte_seconds >= 0),
    days                timestamptz[] not null,
    day_windows         bigint[] not null,
    day_held            numeric[] not null,
    day_known           numeric[] not null,
    day_active          numeric[] not null,
    day_memory          numeric[] not null,
    primary key (month, team_id, slice_id),
    check (cardinality(days) > 0
           and cardinality(day_windows) = cardinality(days)
           and cardinality(day_held) = cardinality(days)
           and cardinality(day_known) = cardinality(days)
           and cardinality(day_active) = cardinality(days)
           and cardinality(day_memory) = cardinality(days))
);

-- The rollups built before this table existed have no rows here: they are built again.
delete from usage_month;
delete from usage_month_done;
