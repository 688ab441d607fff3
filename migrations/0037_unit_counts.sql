-- Each closed hour's unit counts, counted once and kept (issue 44, docs/unit-cost.md "Kept
-- counts").
--
-- The unit cost read every hour of its range from the units' Prometheus at each request: at 1,000
-- GPUs a month's counters took ~23 s of Prometheus' time a request on two cores, and an issued
-- month's unit cost was lost once Prometheus' retention (15 days by default) dropped its samples.
-- A background step of the server now counts each unit's hours once they have settled, a day at a
-- time, and keeps them here; a request reads the hours kept and asks Prometheus only for the
-- others.
--
-- A unit's kept hours are one span, `[kept_from, kept_to)`, extended forward. Where each series
-- stood at `kept_to` is kept with it (`unit_count_stand`), so the next day's counting starts where
-- the last one ended, as one read of the whole span would. A definition whose counting changes
-- (expression or labels) loses what was kept of it and is counted again; a deleted one loses it too.

create table unit_count_span (
    unit      text primary key references unit_definition (name) on delete cascade,
    kept_from timestamptz not null,
    kept_to   timestamptz not null,
    check (kept_from <= kept_to),
    check (kept_from = date_trunc('hour', kept_from, 'UTC')
           and kept_to = date_trunc('hour', kept_to, 'UTC'))
);

-- An hour's increase per (namespace, pod or workload, model), as `units::count` counts it; a key's
-- part is null where the series has no such label.
create table unit_hour_count (
    unit      text not null references unit_count_span (unit) on delete cascade,
    hour      timestamptz not null,
    namespace text,
    join_key  text,
    model     text,
    units     float8 not null check (units >= 0 and units < 'Infinity')
);
create index unit_hour_count_by_hour on unit_hour_count (unit, hour);

-- Where each series (its metric name, empty where the server's answer names none, and its other
-- labels as [name, value] pairs) last stood at its unit's `kept_to`, and the end of the last step
-- that saw it. A series unseen for 31 days is forgotten (pods come and go): if it comes back, it
-- counts from its first sample again, as a new series does.
create table unit_count_stand (
    unit    text not null references unit_count_span (unit) on delete cascade,
    name    text not null,
    labels  jsonb not null,
    value   float8 not null check (value >= 0 and value < 'Infinity'),
    seen_to timestamptz not null,
    primary key (unit, name, labels)
);
