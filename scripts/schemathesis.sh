#!/usr/bin/env bash
# Fuzzes the API with schemathesis (PyPI) against the committed OpenAPI document: a live
# `slicemeter serve` on loopback, over a scratch database holding a simulated fleet, an admin token.
# Fails on any 5xx, any response that breaks its documented status, content type, headers or schema,
# and any request the server accepts without a valid token.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres scripts/schemathesis.sh [BINARY]
#
# BINARY defaults to target/debug/slicemeter. SCHEMATHESIS_MAX_EXAMPLES (default 30) sets how many
# cases each operation gets; the seed is fixed so a failure reproduces.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(realpath "${1:-target/debug/slicemeter}")"
: "${DATABASE_URL:?DATABASE_URL must name a PostgreSQL server this can create a database on}"

venv="${SLICEMETER_SCHEMATHESIS_VENV:-$HOME/.cache/slicemeter/schemathesis}"
if [ ! -x "$venv/bin/schemathesis" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==4.32.5"
fi

db="slicemeter_fuzz_$$"
# The server's own database, to drop the scratch one from: DATABASE_URL names the scratch one below
# (a database cannot be dropped over a connection to itself, and the drop failed silently).
server_url="$DATABASE_URL"
base_url="${DATABASE_URL%/*}"
url="$base_url/$db"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  psql "$server_url" -qc "drop database if exists $db" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
psql "$server_url" -qc "create database $db" >/dev/null

export DATABASE_URL="$url" RUST_LOG=warn
"$bin" migrate >/dev/null
"$bin" rate-card load deploy/rate-card.example.toml >/dev/null
admin="$("$bin" token create --role admin --label schemathesis 2>/dev/null)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$bin" serve --listen "127.0.0.1:$port" --ingest-rate 0 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
# Some data for the reports, invoices and exports to work on.
"$bin" simulate --gpus 8 --days 2 --start 2026-10-01 --seed 7 \
  --post "http://127.0.0.1:$port" --token "$admin" >/dev/null 2>&1

# Each pass signs in with an admin token of its own: fuzzing `DELETE /v1/tokens/{id}` may revoke
# the token it runs with, and every later request would then only get 401.
st() {
  local token
  token="$("$bin" token create --role admin --label "schemathesis $1" 2>/dev/null)"
  "$venv/bin/schemathesis" --config-file "$1" run openapi/openapi.json \
    --url "http://127.0.0.1:$port" \
    -H "Authorization: Bearer $token" \
    --checks all \
    --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-30}" \
    --seed 20261130 \
    --workers 1 "${@:2}"
}

# Where the contract has rules JSON Schema cannot state, a request can fit the schema and still be
# refused with the documented 4xx that names each bad field. For those operations only, that 4xx
# also counts as a right answer to "schema-valid" data; every other check applies unchanged.
#   POST /v1/ingest: windows inside the batch's period, held_seconds <= end - start, slices on the
#     batch's GPUs, known profiles (422); integers written as 1.0 are refused as malformed (400).
#   POST /v1/rate-cards: weights sum to 1, isolation factors in [0, 1], a known ISO 4217 currency,
#     effective_from on an hour boundary (400).
#   GET /v1/reports/usage: a real calendar date (2026-02-30 fits the pattern), to after from, a
#     range no longer than the step allows (400).
#   PUT /v1/teams/{team}: the team `unattributed` cannot own namespaces (400).
#   GET /v1/reports/unit-cost: a real calendar date, to after from, by at most 31 days (400).
#   PUT /v1/unit-definitions/{name}: an expression that reads as PromQL (strings closed, brackets
#     balanced, a series named, no range or subquery over 31 days), label names Prometheus allows,
#     pod_label and workload_label not both (400).
#   GET /v1/ingest/coverage: to after from, by at most 31 days (400).
#   GET /v1/gpus/{uuid}/ledger: a real calendar date, to after from, a range no longer than the
#     step allows (93 days of hours, 366 of days), no hours of an issued month (400).
#   GET /allocation, /allocation/compute: a window of real instants, its end after its start and no
#     longer than the step allows; idle capacity for windows of whole months only (400).
#   POST /v1/tokens: a team lead's team that exists, team only with team_lead and node only with
#     collector, no admin role, an expiry in the future (400).
#   POST /v1/budgets, PUT /v1/budgets/{id}: a team that exists (and, on a change, the budget's own),
#     a known ISO 4217 currency, an amount above 0 with no more decimals than the currency has,
#     auto_months with "auto" only, no threshold or channel twice, only channels this server can
#     send to (a webhook needs --alert-signing-key-file, email --smtp-url), a channel's URL with a
#     host and no user, a namespace of the team's own, a label as key=value, a quarter's amount
#     fixed, idle and spend-change alerts on a whole team's budget only (400).
semantic=("POST /v1/ingest" "POST /v1/rate-cards" "GET /v1/reports/usage" "PUT /v1/teams/{team}"
  "GET /v1/ingest/coverage" "GET /v1/reports/unit-cost" "PUT /v1/unit-definitions/{name}"
  "GET /allocation" "GET /allocation/compute" "POST /v1/tokens" "POST /v1/budgets"
  "PUT /v1/budgets/{id}" "GET /v1/gpus/{uuid}/ledger")
printf '' >"$work/strict.toml"
printf '[checks.positive_data_acceptance]\nexpected-statuses = ["2xx", 400, 401, 403, 404, 409, 413, 422, 429]\n' \
  >"$work/semantic.toml"

status=0
includes=()
for name in "${semantic[@]}"; do includes+=(--include-name "$name"); done
st "$work/semantic.toml" "${includes[@]}" || status=$?
# Revoking tokens last, alone: it may revoke the pass's own token.
excludes=(--exclude-name "DELETE /v1/tokens/{id}")
for name in "${semantic[@]}"; do excludes+=(--exclude-name "$name"); done
st "$work/strict.toml" "${excludes[@]}" || status=$?
st "$work/strict.toml" --include-name "DELETE /v1/tokens/{id}" || status=$?
if grep -q "panicked" "$work/server.log"; then
  echo "the server panicked:" >&2
  grep -A5 "panicked" "$work/server.log" >&2
  status=1
fi
exit "$status"
