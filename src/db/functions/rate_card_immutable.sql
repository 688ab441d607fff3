-- rate_card_immutable: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0002_billing.sql). Change it here; see docs/architecture.md, Storage.
-- Versions are never edited. One not yet in force may be withdrawn (deleted); once in force, never.
create or replace function rate_card_immutable() returns trigger language plpgsql as $$
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
