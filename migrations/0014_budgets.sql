-- Budgets (issue 15): one monthly budget per team, a fixed amount or the average of the team's last
-- closed months (`auto_months`), with thresholds on what is spent or forecast. Every change is
-- audited.
create table budget (
    budget_id   bigint generated always as identity primary key,
    team_id     text not null unique references team,
    amount      numeric check (amount > 0 and amount < 1e15),
    auto_months smallint check (auto_months between 1 and 12),
    currency    text not null check (currency ~ '^[A-Z]{3}$'),
    -- [{"kind": "actual" | "forecast", "percent": 1..1000}], checked by the API.
    thresholds  jsonb not null check (jsonb_typeof(thresholds) = 'array'),
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now(),
    check ((amount is null) <> (auto_months is null))
);

alter table audit_log drop constraint audit_log_action_check;
alter table audit_log add constraint audit_log_action_check
    check (action in ('rate_card.publish', 'rate_card.withdraw', 'invoice.run', 'invoice.issue',
                      'invoice.credit', 'team.put', 'token.create', 'token.revoke', 'gpu.move',
                      'budget.create', 'budget.update', 'budget.delete'));
