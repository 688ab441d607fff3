-- Cost per unit of work (issue 44, DESIGN.md "Cost per unit of work"): what an inference server
-- counts in Prometheus (tokens, inferences), defined by an admin: a PromQL counter expression, the
-- label naming the model, and the labels that join its series to a workload (namespace and pod, or
-- namespace and the workload's owner). Checked by the API before it is stored; every change audited.
create table unit_definition (
    name            text primary key check (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    expression      text not null check (length(expression) between 1 and 2000),
    model_label     text,
    namespace_label text not null,
    pod_label       text,
    workload_label  text,
    -- The cost is given per this many units (1000000: per million tokens).
    per_units       bigint not null check (per_units between 1 and 1000000000),
    description     text check (length(description) <= 500),
    updated_at      timestamptz not null default now(),
    check ((pod_label is null) <> (workload_label is null))
);

alter table audit_log drop constraint audit_log_action_check;
alter table audit_log add constraint audit_log_action_check
    check (action in ('rate_card.publish', 'rate_card.withdraw', 'invoice.run', 'invoice.issue',
                      'invoice.credit', 'team.put', 'token.create', 'token.revoke', 'gpu.move',
                      'budget.create', 'budget.update', 'budget.delete',
                      'unit.put', 'unit.delete'));
