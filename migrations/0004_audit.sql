-- The audit log: who changed what that money depends on, and when. Append-only in the database
-- itself: no UPDATE, DELETE or TRUNCATE gets past the triggers.
create table audit_log (
    audit_id       bigint generated always as identity primary key,
    at             timestamptz not null default now(),
    -- The API token that acted; null for the command line on a host with the database's password.
    actor_token_id bigint,
    actor_role     text not null check (actor_role in ('admin', 'finance', 'team_lead', 'collector', 'cli')),
    action         text not null check (action in ('rate_card.publish', 'invoice.run', 'invoice.issue',
                                                   'invoice.credit', 'team.put', 'token.create',
                                                   'token.revoke')),
    subject        text not null,
    details        jsonb not null default '{}'
);
create index audit_log_at_idx on audit_log (at);

create function audit_log_append_only() returns trigger language plpgsql as $$
begin
    raise exception 'the audit log is append-only: % is refused', tg_op
        using errcode = 'check_violation';
end;
$$;
create trigger audit_log_no_change before update or delete on audit_log
    for each row execute function audit_log_append_only();
create trigger audit_log_no_truncate before truncate on audit_log
    for each statement execute function audit_log_append_only();
