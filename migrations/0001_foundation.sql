-- slicemeter's foundation: the fleet (gpu, slice), who holds it (consumer, team), what was held
-- (occupancy windows and GPU presence, both partitioned by month) and the hourly rollups that every
-- report reads, plus API tokens. Rules that keep the figures honest live here as constraints, so no
-- client, however buggy, can store a window that breaks them.

create table team (
    team_id      text primary key
                 check (team_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    display_name text not null check (length(display_name) between 1 and 200),
    cost_center  text,
    gl_account   text,
    created_at   timestamptz not null default now(),
    updated_at   timestamptz not null default now()
);

-- Consumers no label or namespace claims land here: visible in every report, never dropped.
insert into team (team_id, display_name) values ('unattributed', 'Unattributed');

-- A namespace belongs to at most one team.
create table team_namespace (
    namespace text primary key check (length(namespace) between 1 and 253),
    team_id   text not null references team on delete cascade
);
create index team_namespace_team_idx on team_namespace (team_id);

create table gpu (
    gpu_id         integer generated always as identity primary key,
    gpu_uuid       text not null unique check (length(gpu_uuid) between 1 and 128),
    node           text not null check (length(node) between 1 and 253),
    model          text not null check (length(model) between 1 and 200),
    memory_bytes   bigint not null check (memory_bytes > 0),
    compute_slices smallint not null check (compute_slices between 1 and 8),
    memory_slices  smallint not null check (memory_slices between 1 and 8),
    mig_enabled    boolean not null,
    created_at     timestamptz not null default now()
);
create index gpu_node_idx on gpu (node);

-- A slice's reservation is part of its identity: a MIG instance re-created gets a new uuid, and the
-- collector names MPS, vGPU and time-slice shares so that a changed reservation is a new slice.
-- compute_share and memory_share are the slice's fractions of its GPU, computed once by
-- domain::slice::Reservation::physical_share; for a time-sliced replica they are 1, its measurements
-- being relative to the whole GPU (reserved = false).
create table slice (
    slice_id                 integer generated always as identity primary key,
    slice_uuid               text not null unique check (length(slice_uuid) between 1 and 160),
    gpu_id                   integer not null references gpu,
    kind                     text not null check (kind in ('mig', 'mps', 'timeslice', 'vgpu', 'whole')),
    profile                  text,
    profile_id               integer,
    compute_slices           smallint check (compute_slices between 1 and 8),
    memory_slices            smallint check (memory_slices between 1 and 8),
    memory_bytes             bigint check (memory_bytes > 0),
    active_thread_percentage smallint check (active_thread_percentage between 1 and 100),
    pinned_memory_bytes      bigint check (pinned_memory_bytes > 0),
    fraction                 numeric check (fraction > 0 and fraction <= 1),
    replicas                 smallint check (replicas >= 1),
    replica                  smallint check (replica >= 0 and replica < replicas),
    compute_share            numeric not null check (compute_share > 0 and compute_share <= 1),
    memory_share             numeric not null check (memory_share > 0 and memory_share <= 1),
    memory_reserved_bytes    bigint not null check (memory_reserved_bytes > 0),
    reserved                 boolean not null,
    created_at               timestamptz not null default now(),
    check (reserved = (kind <> 'timeslice')),
    check (kind <> 'mig' or (profile is not null and compute_slices is not null
                             and memory_slices is not null and memory_bytes is not null)),
    check (kind <> 'mps' or (active_thread_percentage is not null and pinned_memory_bytes is not null)),
    check (kind <> 'vgpu' or fraction is not null),
    check (kind <> 'timeslice' or (replicas is not null and replica is not null))
);
create index slice_gpu_idx on slice (gpu_id);

-- Who held a slice. fingerprint is the SHA-256 of the consumer's canonical JSON, so the same pod
-- (same labels) is one row. team_id is the attribution: the team label if any, else the team of the
-- namespace, else unattributed; PUT /v1/teams re-attributes unlabelled consumers of a namespace.
create table consumer (
    consumer_id bigint generated always as identity primary key,
    fingerprint bytea not null unique check (length(fingerprint) = 32),
    namespace   text,
    pod         text,
    container   text,
    unix_user   text,
    job_id      text,
    dra_claim   jsonb,
    labels      jsonb not null default '{}',
    team_label  text,
    team_id     text not null references team,
    created_at  timestamptz not null default now()
);
create index consumer_namespace_idx on consumer (namespace) where team_label is null;
create index consumer_team_idx on consumer (team_id);

-- Occupancy windows: one row per (slice, consumer, window start), kept for the retention period.
-- No foreign keys here: slice_id and consumer_id come from the same transaction's upserts, and a
-- foreign-key trigger per row would cost the COPY fast path a large part of its throughput on a
-- table that grows by billions of rows a month.
create table occupancy (
    slice_id               integer not null,
    consumer_id            bigint not null,
    window_start           timestamptz not null,
    window_end             timestamptz not null,
    held_seconds           numeric not null,
    memory_byte_seconds    numeric not null,
    memory_peak_bytes      bigint not null,
    compute_active_seconds numeric,
    received_at            timestamptz not null default now(),
    primary key (slice_id, consumer_id, window_start),
    constraint occupancy_window_positive check (window_end > window_start),
    constraint occupancy_held_within_window check (
        held_seconds >= 0 and held_seconds <= extract(epoch from window_end - window_start)),
    constraint occupancy_memory_non_negative check (memory_byte_seconds >= 0 and memory_peak_bytes >= 0),
    constraint occupancy_compute_within_held check (
        compute_active_seconds is null
        or (compute_active_seconds >= 0 and compute_active_seconds <= held_seconds))
) partition by range (window_start);

-- GPU presence: the batch periods during which a GPU existed, which is what fleet cost counts. A
-- re-sent batch repeats (gpu, period_start) and is ignored; overlapping periods are refused by ingest.
create table gpu_presence (
    gpu_id       integer not null,
    period_start timestamptz not null,
    period_end   timestamptz not null,
    node         text not null,
    received_at  timestamptz not null default now(),
    primary key (gpu_id, period_start),
    constraint gpu_presence_period_positive check (period_end > period_start)
) partition by range (period_start);

-- Hourly rollups, kept up to date by ingest in the batch's own transaction; reports and billing
-- read only these. Per (slice, consumer) rather than per (slice, team) so that re-attributing a
-- consumer to another team needs no rebuild: the team is the consumer's.
-- compute_known_seconds: held seconds of the windows whose compute activity was measured.
create table usage_hourly (
    hour                   timestamptz not null,
    slice_id               integer not null,
    consumer_id            bigint not null,
    held_seconds           numeric not null check (held_seconds >= 0 and held_seconds <= 3600),
    memory_byte_seconds    numeric not null check (memory_byte_seconds >= 0),
    memory_peak_bytes      bigint not null check (memory_peak_bytes >= 0),
    compute_active_seconds numeric not null check (compute_active_seconds >= 0),
    compute_known_seconds  numeric not null check (compute_known_seconds >= 0),
    window_count           integer not null check (window_count >= 0),
    primary key (hour, slice_id, consumer_id),
    check (date_trunc('hour', hour, 'UTC') = hour),
    check (compute_known_seconds <= held_seconds and compute_active_seconds <= compute_known_seconds)
) partition by range (hour);

create table gpu_hourly (
    hour            timestamptz not null,
    gpu_id          integer not null,
    present_seconds numeric not null check (present_seconds > 0 and present_seconds <= 3600),
    primary key (hour, gpu_id),
    check (date_trunc('hour', hour, 'UTC') = hour)
) partition by range (hour);

-- Creates one month's partition of one partitioned table if it is missing. Called ahead of time by
-- `serve` and before a batch that reaches a month not yet seen, one table per statement: creating a
-- partition locks its parent exclusively, and a transaction that held one parent while waiting for
-- another would deadlock with a batch that writes both. Creation is serialised by an advisory lock;
-- the common case, the partition already there, takes no lock at all.
create function ensure_month_partition(p_parent text, p_month date) returns void
language plpgsql as $$
declare
    first_day date := date_trunc('month', p_month)::date;
    next_day  date := (date_trunc('month', p_month) + interval '1 month')::date;
    part      text := format('%s_y%sm%s', p_parent, to_char(first_day, 'YYYY'), to_char(first_day, 'MM'));
begin
    if p_parent not in ('occupancy', 'gpu_presence', 'usage_hourly', 'gpu_hourly') then
        raise exception 'ensure_month_partition: % is not a partitioned table of slicemeter', p_parent;
    end if;
    if to_regclass(format('%I.%I', current_schema(), part)) is null then
        perform pg_advisory_xact_lock(hashtext('slicemeter.ensure_month_partition'));
        execute format(
            'create table if not exists %I partition of %I for values from (%L) to (%L)',
            part, p_parent, first_day::text || ' 00:00:00+00', next_day::text || ' 00:00:00+00');
    end if;
end;
$$;

create table api_token (
    api_token_id bigint generated always as identity primary key,
    role         text not null check (role in ('admin', 'finance', 'team_lead', 'collector')),
    team_id      text references team,
    node         text,
    secret_hash  bytea not null check (length(secret_hash) = 32),
    label        text,
    created_at   timestamptz not null default now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    check ((role = 'team_lead') = (team_id is not null)),
    check ((role = 'collector') = (node is not null))
);
