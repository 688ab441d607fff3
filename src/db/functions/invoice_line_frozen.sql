-- invoice_line_frozen: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0002_billing.sql). Change it here; see docs/architecture.md, Storage.
create or replace function invoice_line_frozen() returns trigger language plpgsql as $$
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
