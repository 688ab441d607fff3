-- Alerts (issue 15): what a budget watches besides its thresholds, where its alerts go, each alert
-- fired once, and each delivery's state; and budgets narrower than a team's month.

-- `scope`: '' for the whole team, `namespace:<ns>` (one of its namespaces) or `label:<key>=<value>`
-- (its pods with that label). `period`: the month, or the quarter. A team has one budget a scope
-- and period.
alter table budget
    add column scope  text not null default '' check (scope = '' or scope ~ '^(namespace|label):.'),
    add column period text not null default 'month' check (period in ('month', 'quarter'));
alter table budget drop constraint budget_team_id_key;
alter table budget add constraint budget_team_scope_period unique (team_id, scope, period);

-- `channels`: [{"type": "webhook" | "slack", "url": ...} | {"type": "email", "to": ...}], checked by
-- the API. `idle_days`: alert on a slice held that many whole days without compute. `spend_change`:
-- alert on a day costing more than this many times the trailing median day.
alter table budget
    add column channels     jsonb not null default '[]' check (jsonb_typeof(channels) = 'array'),
    add column idle_days    smallint check (idle_days between 1 and 31),
    add column spend_change numeric check (spend_change > 1 and spend_change <= 100);

-- An alert, fired once: the unique key is the fire-once state. Whichever server inserts it first
-- delivers it; every other insert of the same key does nothing. A deleted budget's alerts stay.
create table alert (
    alert_id  bigint generated always as identity primary key,
    budget_id bigint references budget on delete set null,
    team_id   text not null references team,
    -- The month the alert is about, as its first day.
    period    date not null check (date_trunc('month', period) = period),
    kind      text not null check (kind in ('actual', 'forecast', 'idle', 'spend_change')),
    -- What makes the alert one of its kind: the threshold's percent, the idle slice, the day.
    key       text not null,
    subject   text not null,
    details   jsonb not null,
    fired_at  timestamptz not null default now(),
    unique (budget_id, period, kind, key)
);
create index alert_team on alert (team_id, fired_at desc);

-- One delivery per channel of the budget when the alert fired. A server claims a due one with
-- `for update skip locked`, so no two servers send it at once; a failed send is retried with
-- backoff until `failed`.
create table alert_delivery (
    delivery_id     bigint generated always as identity primary key,
    alert_id        bigint not null references alert on delete cascade,
    channel         jsonb not null,
    state           text not null default 'pending' check (state in ('pending', 'delivered', 'failed')),
    attempts        integer not null default 0 check (attempts >= 0),
    next_attempt_at timestamptz not null default now(),
    last_error      text,
    delivered_at    timestamptz
);
create index alert_delivery_alert on alert_delivery (alert_id);
create index alert_delivery_due on alert_delivery (next_attempt_at) where state = 'pending';
