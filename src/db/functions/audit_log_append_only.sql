-- audit_log_append_only: its current definition, applied by `db::migrate` after the migrations (last
-- changed by migrations/0004_audit.sql). Change it here; see docs/architecture.md, Storage.
create or replace function audit_log_append_only() returns trigger language plpgsql as $$
begin
    raise exception 'the audit log is append-only: % is refused', tg_op
        using errcode = 'check_violation';
end;
$$;
