-- Dashboard sign-in sessions. The browser holds a random secret in an HttpOnly cookie; only its
-- SHA-256 is stored. A session acts with the API token it was opened with, so revoking the token ends
-- the session too.
create table ui_session (
    session_hash bytea primary key check (length(session_hash) = 32),
    api_token_id bigint not null references api_token on delete cascade,
    created_at   timestamptz not null default now(),
    expires_at   timestamptz not null
);
create index ui_session_expiry_idx on ui_session (expires_at);
