-- One holder at a time: the store finds the windows a re-sent period already holds by slice and
-- time, so occupancy's key leads with (slice, window start). The key's columns, and so what counts as
-- the same window, do not change.
alter table occupancy drop constraint occupancy_pkey;
alter table occupancy add primary key (slice_id, window_start, consumer_id);

-- Moving a GPU to another node is an admin's act, and withdrawing a rate card not yet in force is
-- finance's: both are audited.
alter table audit_log drop constraint audit_log_action_check;
alter table audit_log add constraint audit_log_action_check
    check (action in ('rate_card.publish', 'rate_card.withdraw', 'invoice.run', 'invoice.issue',
                      'invoice.credit', 'team.put', 'token.create', 'token.revoke', 'gpu.move'));
