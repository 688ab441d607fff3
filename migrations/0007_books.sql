-- The books of a period: what its invoice run priced, kept so that once the period is issued its
-- invoices, monthly report and exports are read from what was issued and never change, whatever
-- arrives later (late windows, re-attributed consumers become corrections on a later period).

-- A period's books: written by each invoice run while none of its invoices is issued, frozen by the
-- first issue. frozen_at returns to null only when a credit note voids the last issued invoice.
create table book (
    period     date primary key check (extract(day from period) = 1),
    drafted_at timestamptz not null default now(),
    frozen_at  timestamptz
);

create table book_slice_day (
    period                date not null references book on delete cascade,
    team_id               text not null,
    team_name             text not null,
    cost_center           text,
    model                 text not null,
    kind                  text not null,
    profile               text,
    rate_card_id          bigint,
    slice_id              integer not null,
    slice_uuid            text not null,
    node                  text not null,
    day                   timestamptz not null,
    windows               bigint not null,
    held_seconds          numeric not null,
    known_seconds         numeric not null,
    active_seconds        numeric not null,
    memory_byte_seconds   numeric not null,
    compute_share         numeric not null,
    memory_share          numeric not null,
    memory_reserved_bytes bigint not null
);
create index book_slice_day_line_idx
    on book_slice_day (period, team_id, model, kind, profile, rate_card_id, slice_uuid, day);

create table book_model_day (
    period          date not null references book on delete cascade,
    model           text not null,
    rate_card_id    bigint,
    day             timestamptz not null,
    present_seconds numeric not null
);
create index book_model_day_idx on book_model_day (period, model, rate_card_id, day);

-- The usage and presence a period's figures are read from: its books (`from_book`), or what the
-- rollups hold now. One (team, slice, day) of usage under one rate card version, with the share the
-- slice blocks and the names the exports print, is the grain of the FOCUS rows, and invoices are
-- priced from the same rows; teams' names and cost centers are as they were when read.
create function period_slice_day(p date, from_book boolean) returns setof book_slice_day
language sql stable as $$
    select * from book_slice_day where from_book and period = p
    union all
    select p, c.team_id, coalesce(t.display_name, c.team_id), t.cost_center,
           g.model, s.kind, s.profile, r.rate_card_id, s.slice_id, s.slice_uuid, g.node,
           date_trunc('day', u.hour, 'UTC'),
           sum(u.window_count)::int8, sum(u.held_seconds), sum(u.compute_known_seconds),
           sum(u.compute_active_seconds), sum(u.memory_byte_seconds),
           s.compute_share, s.memory_share, s.memory_reserved_bytes
    from usage_hourly u
    join consumer c using (consumer_id)
    left join team t on t.team_id = c.team_id
    join slice s using (slice_id)
    join gpu g using (gpu_id)
    left join rate_card_span r
           on u.hour >= r.effective_from and (r.effective_until is null or u.hour < r.effective_until)
    where not from_book
      and u.hour >= (p::timestamp at time zone 'UTC')
      and u.hour < ((p + interval '1 month') at time zone 'UTC')
    group by c.team_id, t.display_name, t.cost_center, g.model, s.kind, s.profile, r.rate_card_id,
             s.slice_id, g.node, date_trunc('day', u.hour, 'UTC')
$$;

-- GPU presence per (model, rate card version, day): what fleet cost is priced from.
create function period_model_day(p date, from_book boolean) returns setof book_model_day
language sql stable as $$
    select * from book_model_day where from_book and period = p
    union all
    select p, g.model, r.rate_card_id, date_trunc('day', h.hour, 'UTC'), sum(h.present_seconds)
    from gpu_hourly h
    join gpu g using (gpu_id)
    left join rate_card_span r
           on h.hour >= r.effective_from and (r.effective_until is null or h.hour < r.effective_until)
    where not from_book
      and h.hour >= (p::timestamp at time zone 'UTC')
      and h.hour < ((p + interval '1 month') at time zone 'UTC')
    group by g.model, r.rate_card_id, date_trunc('day', h.hour, 'UTC')
$$;

-- A frozen book's rows never change, and none are added; a book is unfrozen only when no issued
-- invoice is left.
create function book_rows_frozen() returns trigger language plpgsql as $$
declare
    p date := case when tg_op = 'INSERT' then new.period else old.period end;
begin
    if exists (select 1 from book b where b.period = p and b.frozen_at is not null) then
        raise exception 'the books of % are issued and cannot be changed', to_char(p, 'YYYY-MM')
            using errcode = 'check_violation';
    end if;
    return case when tg_op = 'DELETE' then old else new end;
end;
$$;
create trigger book_slice_day_frozen before insert or update or delete on book_slice_day
    for each row execute function book_rows_frozen();
create trigger book_model_day_frozen before insert or update or delete on book_model_day
    for each row execute function book_rows_frozen();

create function book_frozen() returns trigger language plpgsql as $$
begin
    if old.frozen_at is null then
        return case when tg_op = 'DELETE' then old else new end;
    end if;
    if tg_op = 'UPDATE' and new.frozen_at is null and new.period = old.period
       and not exists (select 1 from invoice i where i.period = old.period
                       and i.kind = 'invoice' and i.status = 'issued') then
        return new;
    end if;
    raise exception 'the books of % are issued and cannot be changed', to_char(old.period, 'YYYY-MM')
        using errcode = 'check_violation';
end;
$$;
create trigger book_frozen before update or delete on book
    for each row execute function book_frozen();

-- An invoice names whom it bills as they were when it was drafted: the journal of an issued period
-- does not change when a team's cost center does.
alter table invoice add column team_name text, add column cost_center text, add column gl_account text;

-- For a correction line: what had been billed for its key when it was drafted. Issuing checks that
-- nothing has been billed for it since, so that a correction is billed once.
alter table invoice_line add column billed_before numeric;

create or replace function invoice_frozen() returns trigger language plpgsql as $$
begin
    if tg_op = 'DELETE' then
        if old.status <> 'draft' then
            raise exception 'invoice % is % and cannot be deleted', coalesce(old.number, old.invoice_id::text), old.status
                using errcode = 'check_violation';
        end if;
        return old;
    end if;
    if old.status = 'draft' then
        return new;
    end if;
    if old.status = 'issued' and new.status = 'void'
       and (new.invoice_id, new.kind, new.team_id, new.period, new.currency, new.total, new.number_year,
            new.number_seq, new.credits, new.created_at, new.issued_at, new.issued_by, new.team_name,
            new.cost_center, new.gl_account)
           is not distinct from
           (old.invoice_id, old.kind, old.team_id, old.period, old.currency, old.total, old.number_year,
            old.number_seq, old.credits, old.created_at, old.issued_at, old.issued_by, old.team_name,
            old.cost_center, old.gl_account)
       and exists (select 1 from invoice c where c.credits = old.invoice_id and c.status = 'issued') then
        return new;
    end if;
    raise exception 'invoice % is % and cannot be changed; issue a credit note instead', old.number, old.status
        using errcode = 'check_violation';
end;
$$;

-- `unattributed` is never invoiced: its cost stays on the platform line until its consumers are
-- attributed. Its drafts from before this rule go (the next run makes none); its issued invoices
-- stay, and can still be credited.
delete from invoice where team_id = 'unattributed' and status = 'draft';
alter table invoice add constraint invoice_not_unattributed
    check (team_id <> 'unattributed' or status <> 'draft');

-- Months issued before books were kept are frozen as they stand at this upgrade: from now on their
-- figures no longer move, and what arrives for them becomes corrections like for any issued month.
insert into book (period)
select distinct period from invoice where kind = 'invoice' and status = 'issued';
insert into book_slice_day select d.* from book b cross join lateral period_slice_day(b.period, false) d;
insert into book_model_day select d.* from book b cross join lateral period_model_day(b.period, false) d;
update book set frozen_at = now();
