-- Namespace ownership over time (issue 39): a namespace belongs to a team from an instant, as a
-- rate card is in force from one, and its unlabelled consumers' usage goes to the team that owned
-- it at each moment of a window.
--
-- Until now a namespace had one owner (`team_namespace`), copied onto its unlabelled consumers
-- (`consumer.team_id`), and changing it re-attributed every hour of those consumers in every month
-- not issued: a namespace handed to another team on the 11th billed the new team from the 1st.
--
-- 1. `namespace_owner` keeps the versions: from `effective_from` until the next version of the same
--    namespace, `team_id` owns it (null: no team, so its unlabelled consumers are `unattributed`).
--    The mappings of before become versions from 2000-01-01, the first instant the ingest contract
--    accepts: from the beginning of data, so upgrading keeps today's bills.
-- 2. The team is part of the rollups' key: `usage_hourly`, `usage_daily` and `usage_month_days`
--    are kept per (slice, consumer, team), since a consumer's usage in one hour may belong to two
--    teams (a window that straddles a change is split at the instant, in proportion to its time, as
--    ingest splits one that straddles an hour). Every read that joined the consumer for its team
--    takes the row's own. Each row's team is its consumer's now: the same attribution as before.
--    This rewrites both rollups once (as 0019 did, adding their GPU); the key grows by the team id.
-- 3. `consumer.team_id` goes: a consumer has a team only at an instant (its label's, else its
--    namespace's owner's then).

create table namespace_owner (
    namespace      text not null check (length(namespace) between 1 and 253),
    effective_from timestamptz not null check (effective_from >= '2000-01-01 00:00:00+00'),
    team_id        text references team,
    recorded_at    timestamptz not null default now(),
    -- Why a version starts in the past (the audit log says who); null for one from now.
    reason         text check (length(reason) between 1 and 1000),
    primary key (namespace, effective_from)
);
create index namespace_owner_team_idx on namespace_owner (team_id);

insert into namespace_owner (namespace, effective_from, team_id, reason)
select namespace, '2000-01-01 00:00:00+00', team_id,
       'the mapping as it stood when ownership became effective-dated (migration 0023)'
from team_namespace;
drop table team_namespace;

-- The team that owns `ns` at `at`: `unattributed` when none does.
create function namespace_team_at(ns text, at timestamptz) returns text
language sql stable parallel safe as $$
    select coalesce((select o.team_id from namespace_owner o
                     where o.namespace = ns and o.effective_from <= at
                     order by o.effective_from desc limit 1),
                    'unattributed')
$$;

-- The team of a consumer with `label` (its `team` label) and namespace `ns` at `at`.
create function consumer_team_at(label text, ns text, at timestamptz) returns text
language sql stable parallel safe as $$
    select coalesce(label, case when ns is not null then namespace_team_at(ns, at) end,
                    'unattributed')
$$;

-- Each namespace a team owns now, with the team: what `team_namespace` held.
create view team_namespace_now as
select n.namespace, n.team_id
from (select distinct on (o.namespace) o.namespace, o.team_id
      from namespace_owner o
      where o.effective_from <= now()
      order by o.namespace, o.effective_from desc) n
where n.team_id is not null;

alter table usage_hourly add column team_id text;
update usage_hourly u set team_id = c.team_id from consumer c where c.consumer_id = u.consumer_id;
alter table usage_hourly alter column team_id set not null;
alter table usage_hourly drop constraint usage_hourly_pkey;
alter table usage_hourly add primary key (hour, slice_id, gpu_id, consumer_id, team_id);

alter table usage_daily add column team_id text;
update usage_daily u set team_id = c.team_id from consumer c where c.consumer_id = u.consumer_id;
alter table usage_daily alter column team_id set not null;
alter table usage_daily drop constraint usage_daily_pkey;
alter table usage_daily add primary key (day, slice_id, gpu_id, consumer_id, team_id);

alter table usage_month_days add column team_id text;
update usage_month_days u set team_id = c.team_id from consumer c where c.consumer_id = u.consumer_id;
alter table usage_month_days alter column team_id set not null;
alter table usage_month_days drop constraint usage_month_days_pkey;
alter table usage_month_days add primary key (month, slice_id, gpu_id, consumer_id, team_id);
-- A change of ownership finds the days its namespace's consumers held slices on by consumer.
create index usage_month_days_consumer_idx on usage_month_days (consumer_id, month);

-- Replaced by the re-attribution of the hours a change reaches (`teams::store`).
drop function move_consumers_days(bigint[], text[]);
drop function moved_consumer_days(bigint[], text[]);

alter table consumer drop column team_id;

-- As in 0022, the team each day rollup row holds.
create or replace function fill_team_day_rollups() returns void
language sql as $$
    insert into usage_team_daily
    select d.day, d.team_id, g.model, s.kind, s.profile, s.compute_share, s.memory_share,
           s.memory_reserved_bytes, sum(d.held_seconds), sum(d.memory_byte_seconds),
           sum(d.compute_active_seconds), sum(d.compute_known_seconds), sum(d.window_count)
    from usage_daily d
    join slice s on s.slice_id = d.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    group by 1, 2, 3, 4, 5, 6, 7, 8;

    insert into usage_month_days
    select date_trunc('month', d.day, 'UTC'), d.gpu_id, d.slice_id, d.consumer_id,
           bit_or(day_bit(d.day)), d.team_id
    from usage_daily d
    group by 1, 2, 3, 4, 6;
$$;

-- As in 0021, with each row's team.
drop function period_slice_keys(date);
drop function period_slice_sums(date, boolean);
drop function period_usage_days(date);

create function period_usage_days(p date)
returns table (slice_id integer, consumer_id bigint, team_id text, rate_card_id bigint,
               day timestamptz, windows bigint, held numeric, known numeric, active numeric,
               memory numeric)
language sql stable as $$
    select d.slice_id, d.consumer_id, d.team_id,
           -- The version in force at each day's start (a UTC midnight, stepped without a time
           -- zone: no daylight saving), by day of the month.
           (select array_agg(r.rate_card_id order by x.t)
            from generate_series(p::timestamp,
                                 (p + interval '1 month')::timestamp - interval '1 day',
                                 interval '1 day') x(t)
            left join rate_card_span r
                   on x.t at time zone 'UTC' >= r.effective_from
                  and (r.effective_until is null or x.t at time zone 'UTC' < r.effective_until)
           )[extract(day from d.day at time zone 'UTC')::int],
           d.day, d.window_count::int8, d.held_seconds, d.compute_known_seconds,
           d.compute_active_seconds, d.memory_byte_seconds
    from usage_daily d
    where d.day >= (p::timestamp at time zone 'UTC')
      and d.day < ((p + interval '1 month') at time zone 'UTC')
      and d.day not in (select split_days(p))
    union all
    select h.slice_id, h.consumer_id, h.team_id, r.rate_card_id, date_trunc('day', h.hour, 'UTC'),
           sum(h.window_count)::int8, sum(h.held_seconds), sum(h.compute_known_seconds),
           sum(h.compute_active_seconds), sum(h.memory_byte_seconds)
    from usage_hourly h
    left join rate_card_span r
           on h.hour >= r.effective_from
          and (r.effective_until is null or h.hour < r.effective_until)
    where h.hour >= (p::timestamp at time zone 'UTC')
      and h.hour < ((p + interval '1 month') at time zone 'UTC')
      and date_trunc('day', h.hour, 'UTC') in (select split_days(p))
    group by 1, 2, 3, 4, 5
$$;

create function period_slice_keys(p date)
returns table (slice_id integer, team_id text, rate_card_id bigint, day timestamptz,
               windows bigint, held numeric, known numeric, active numeric, memory numeric)
language sql stable as $$
    select u.slice_id, u.team_id, u.rate_card_id, u.day, sum(u.windows)::int8, sum(u.held),
           sum(u.known), sum(u.active), sum(u.memory)
    from period_usage_days(p) u
    group by u.slice_id, u.team_id, u.rate_card_id, u.day
$$;

create function period_slice_sums(p date, from_book boolean)
returns table (team_id text, model text, kind text, profile text, rate_card_id bigint,
               slice_id integer, compute_share numeric, memory_share numeric,
               memory_reserved_bytes bigint, windows bigint, first_day timestamptz,
               held_seconds numeric, known_seconds numeric, active_seconds numeric,
               memory_byte_seconds numeric)
language sql stable as $$
    select b.team_id, b.model, b.kind, b.profile, b.rate_card_id, b.slice_id, b.compute_share,
           b.memory_share, b.memory_reserved_bytes, b.windows, b.first_day, b.held_seconds,
           b.known_seconds, b.active_seconds, b.memory_byte_seconds
    from book_slice b
    where from_book and b.period = p
    union all
    select u.team_id, g.model, s.kind, s.profile, u.rate_card_id, s.slice_id, s.compute_share,
           s.memory_share, s.memory_reserved_bytes, sum(u.windows)::int8, min(u.day),
           sum(u.held), sum(u.known), sum(u.active), sum(u.memory)
    from period_usage_days(p) u
    join slice s using (slice_id)
    join gpu g using (gpu_id)
    where not from_book
    group by u.team_id, g.model, s.kind, s.profile, u.rate_card_id, s.slice_id, s.compute_share,
             s.memory_share, s.memory_reserved_bytes
$$;

-- As in 0022, each row's team its own.
create or replace function period_team_lines(p date)
returns table (team_id text, model text, kind text, profile text, rate_card_id bigint,
               compute_share numeric, memory_share numeric, memory_reserved_bytes bigint,
               slices bigint, windows bigint, first_day timestamptz, held numeric, known numeric,
               active numeric, memory numeric)
language sql stable as $$
    with whole_days as (
        select x.t at time zone 'UTC' as day, r.rate_card_id
        from generate_series(p::timestamp,
                             (p + interval '1 month')::timestamp - interval '1 day',
                             interval '1 day') x(t)
        left join rate_card_span r
               on x.t at time zone 'UTC' >= r.effective_from
              and (r.effective_until is null or x.t at time zone 'UTC' < r.effective_until)
        where x.t at time zone 'UTC' not in (select split_days(p))),
    split_hours as (
        select h.slice_id, h.team_id, r.rate_card_id, h.hour, h.window_count, h.held_seconds,
               h.compute_known_seconds, h.compute_active_seconds, h.memory_byte_seconds
        from usage_hourly h
        left join rate_card_span r
               on h.hour >= r.effective_from
              and (r.effective_until is null or h.hour < r.effective_until)
        where h.hour >= (p::timestamp at time zone 'UTC')
          and h.hour < ((p + interval '1 month') at time zone 'UTC')
          and date_trunc('day', h.hour, 'UTC') in (select split_days(p))),
    held_slices as (
        select k.slice_id, v.rate_card_id, k.team_id
        from usage_month_days k
        join (select rate_card_id, bit_or(day_bit(day)) as days from whole_days
              group by rate_card_id) v on k.days & v.days <> 0
        where k.month = (p::timestamp at time zone 'UTC')
        union
        select slice_id, rate_card_id, team_id from split_hours)
    select t.team_id, t.model, t.kind, t.profile, v.rate_card_id, t.compute_share, t.memory_share,
           t.memory_reserved_bytes, 0::int8, sum(t.window_count)::int8, min(t.day),
           sum(t.held_seconds), sum(t.compute_known_seconds), sum(t.compute_active_seconds),
           sum(t.memory_byte_seconds)
    from usage_team_daily t
    join whole_days v on v.day = t.day
    where t.day >= (p::timestamp at time zone 'UTC')
      and t.day < ((p + interval '1 month') at time zone 'UTC')
    group by 1, 2, 3, 4, 5, 6, 7, 8
    union all
    select h.team_id, g.model, s.kind, s.profile, h.rate_card_id, s.compute_share, s.memory_share,
           s.memory_reserved_bytes, 0, sum(h.window_count)::int8,
           min(date_trunc('day', h.hour, 'UTC')), sum(h.held_seconds),
           sum(h.compute_known_seconds), sum(h.compute_active_seconds), sum(h.memory_byte_seconds)
    from split_hours h
    join slice s on s.slice_id = h.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    group by 1, 2, 3, 4, 5, 6, 7, 8
    union all
    select k.team_id, g.model, s.kind, s.profile, k.rate_card_id, s.compute_share, s.memory_share,
           s.memory_reserved_bytes, count(*), 0, null, 0, 0, 0, 0
    from held_slices k
    join slice s on s.slice_id = k.slice_id
    join gpu g on g.gpu_id = s.gpu_id
    group by 1, 2, 3, 4, 5, 6, 7, 8
$$;
