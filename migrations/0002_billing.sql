-- Billing: effective-dated rate cards, invoices with gap-free numbers, and the rules that keep both
-- honest in the database itself: a rate card in force is never edited, an issued invoice never
-- changes (it may only be voided, by a credit note that references it).

-- A rate card version prices every hour from effective_from until the next version's effective_from.
create table rate_card (
    rate_card_id        bigint generated always as identity primary key,
    effective_from      timestamptz not null unique
                        check (date_trunc('hour', effective_from, 'UTC') = effective_from),
    currency            text not null check (currency ~ '^[A-Z]{3}$'),
    minor_units         smallint not null check (minor_units between 0 and 4),
    weight_compute      numeric not null check (weight_compute between 0 and 1),
    weight_memory       numeric not null check (weight_memory between 0 and 1),
    factor_mig          numeric not null check (factor_mig between 0 and 1),
    factor_whole        numeric not null check (factor_whole between 0 and 1),
    factor_mps          numeric not null check (factor_mps between 0 and 1),
    factor_vgpu         numeric not null check (factor_vgpu between 0 and 1),
    factor_timeslice    numeric not null check (factor_timeslice between 0 and 1),
    idle_policy         text not null check (idle_policy in ('platform', 'spread')),
    -- What a GPU model missing from the price list costs an hour; reports name such models.
    default_hourly_cost numeric not null check (default_hourly_cost >= 0),
    note                text,
    created_at          timestamptz not null default now(),
    created_by          bigint,
    check (weight_compute + weight_memory = 1)
);

-- Hourly cost per GPU model, matched on the name NVML reports (e.g. 'NVIDIA H100 80GB HBM3').
create table rate_card_price (
    rate_card_id bigint not null references rate_card on delete cascade,
    gpu_model    text not null check (length(gpu_model) between 1 and 200),
    hourly_cost  numeric not null check (hourly_cost >= 0),
    primary key (rate_card_id, gpu_model)
);

-- Versions are never edited. One not yet in force may be withdrawn (deleted); once in force, never.
create function rate_card_immutable() returns trigger language plpgsql as $$
declare
    card_from timestamptz;
begin
    if tg_table_name = 'rate_card' then
        card_from := old.effective_from;
    else
        select effective_from into card_from from rate_card where rate_card_id = old.rate_card_id;
    end if;
    if tg_op = 'UPDATE' then
        raise exception 'rate card % is a published version and cannot be edited; add a new version', old.rate_card_id
            using errcode = 'check_violation';
    end if;
    if card_from is not null and card_from <= now() then
        raise exception 'rate card % is in force since % and cannot be deleted', old.rate_card_id, card_from
            using errcode = 'check_violation';
    end if;
    return old;
end;
$$;
create trigger rate_card_immutable before update or delete on rate_card
    for each row execute function rate_card_immutable();
create trigger rate_card_price_immutable before update or delete on rate_card_price
    for each row execute function rate_card_immutable();

-- Invoices and credit notes. A draft is replaced freely; issuing gives it the next number of its
-- year, gap-free (invoice_counter's row lock serialises issuers and a rolled-back issue returns its
-- number), and freezes it.
create table invoice (
    invoice_id   bigint generated always as identity primary key,
    kind         text not null default 'invoice' check (kind in ('invoice', 'credit_note')),
    team_id      text not null references team,
    period       date not null check (extract(day from period) = 1),
    status       text not null default 'draft' check (status in ('draft', 'issued', 'void')),
    currency     text not null check (currency ~ '^[A-Z]{3}$'),
    total        numeric not null,
    number_year  integer,
    number_seq   integer,
    number       text generated always as (
                     case when number_seq is null then null
                          else 'SM-' || number_year || '-' || lpad(number_seq::text, 6, '0') end) stored,
    credits      bigint references invoice,
    created_at   timestamptz not null default now(),
    issued_at    timestamptz,
    issued_by    bigint,
    unique (number_year, number_seq),
    check ((status = 'draft') = (number_seq is null)),
    check ((status = 'draft') = (issued_at is null)),
    check ((kind = 'credit_note') = (credits is not null)),
    check (kind = 'invoice' or status <> 'void')
);
-- At most one live (draft or issued) invoice per team and period.
create unique index invoice_live_idx on invoice (team_id, period)
    where kind = 'invoice' and status <> 'void';
create unique index credit_note_once_idx on invoice (credits) where kind = 'credit_note';

create table invoice_counter (
    year integer primary key,
    last integer not null check (last >= 0)
);

create table invoice_line (
    invoice_id           bigint not null references invoice on delete cascade,
    line_no              integer not null check (line_no >= 1),
    line_kind            text not null check (line_kind in ('usage', 'idle_spread', 'correction', 'credit')),
    description          text not null,
    gpu_model            text,
    slice_kind           text,
    profile              text,
    rate_card_id         bigint references rate_card,
    price_source         text check (price_source in ('listed', 'default')),
    slice_hours          numeric not null,
    gpu_equivalent_hours numeric not null,
    unit_price           numeric,
    exact_amount         numeric not null,
    amount               numeric not null,
    windows              bigint not null default 0,
    corrects_period      date,
    primary key (invoice_id, line_no),
    check (line_kind <> 'correction' or corrects_period is not null),
    check (line_kind not in ('usage', 'idle_spread') or corrects_period is null)
);

-- Issued invoices and their lines are frozen. The one change allowed: an issued invoice becomes
-- void, nothing else about it changing, when a credit note for it is issued.
create function invoice_frozen() returns trigger language plpgsql as $$
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
            new.number_seq, new.credits, new.created_at, new.issued_at, new.issued_by)
           is not distinct from
           (old.invoice_id, old.kind, old.team_id, old.period, old.currency, old.total, old.number_year,
            old.number_seq, old.credits, old.created_at, old.issued_at, old.issued_by)
       and exists (select 1 from invoice c where c.credits = old.invoice_id and c.status = 'issued') then
        return new;
    end if;
    raise exception 'invoice % is % and cannot be changed; issue a credit note instead', old.number, old.status
        using errcode = 'check_violation';
end;
$$;
create trigger invoice_frozen before update or delete on invoice
    for each row execute function invoice_frozen();

create function invoice_line_frozen() returns trigger language plpgsql as $$
declare
    st text;
begin
    select status into st from invoice
     where invoice_id = case when tg_op = 'INSERT' then new.invoice_id else old.invoice_id end;
    -- A deleted invoice's lines go with it (cascade), when the invoice itself may be deleted.
    if st is null or st = 'draft' then
        return case when tg_op = 'DELETE' then old else new end;
    end if;
    raise exception 'the lines of an % invoice cannot be changed', st
        using errcode = 'check_violation';
end;
$$;
create trigger invoice_line_frozen before insert or update or delete on invoice_line
    for each row execute function invoice_line_frozen();
