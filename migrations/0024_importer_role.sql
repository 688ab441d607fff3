-- The importer role (`slicemeter import prometheus`): it ingests for any node and reads which
-- periods are stored, nothing else, so that a back-fill job needs no admin token.
alter table api_token drop constraint api_token_role_check;
alter table api_token add constraint api_token_role_check
    check (role in ('admin', 'finance', 'team_lead', 'collector', 'importer'));
alter table audit_log drop constraint audit_log_actor_role_check;
alter table audit_log add constraint audit_log_actor_role_check
    check (actor_role in ('admin', 'finance', 'team_lead', 'collector', 'importer', 'cli'));
