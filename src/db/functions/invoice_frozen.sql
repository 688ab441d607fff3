-- invoice_frozen: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0007_books.sql). Change it here; see docs/architecture.md, Storage.
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
