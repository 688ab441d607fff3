//! The authorization matrix: every route of the OpenAPI document called as every kind of caller,
//! with the status each must get, and no team's data in another team lead's answers. A route the
//! document has and the matrix lacks (or the other way round) fails the test.
//!
//! The file stays whole: the matrix and the callers it is checked against are one table.

use std::collections::BTreeSet;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use slicemeter::domain::access::Role;

use crate::billing::{draft_of, issue, rate_card};
use crate::support::*;

/// The callers, in the order of each row's expected statuses.
const CALLERS: [&str; 10] = [
    "no token",
    "malformed token",
    "revoked token",
    "expired token",
    "admin",
    "finance",
    "team lead of aardvark",
    "team lead of zebra",
    "collector of gpu-node-01",
    "importer",
];
const LEAD_A: usize = 6;
const LEAD_B: usize = 7;

struct Row {
    method: &'static str,
    /// The path as the OpenAPI document writes it.
    path: &'static str,
    /// The path called, with its parameters filled in.
    uri: String,
    /// The body for the caller at this index (by `CALLERS`), if the route takes one.
    body: Option<Box<dyn Fn(usize) -> Value>>,
    expect: [u16; 10],
}

fn row(method: &'static str, path: &'static str, uri: impl Into<String>, expect: [u16; 10]) -> Row {
    Row {
        method,
        path,
        uri: uri.into(),
        body: None,
        expect,
    }
}

fn with_body(mut r: Row, body: impl Fn(usize) -> Value + 'static) -> Row {
    r.body = Some(Box::new(body));
    r
}

/// Two teams' windows on one node in September and October 2026.
async fn two_teams(app: &TestApp) {
    app.put_team("aardvark", &["ns-aardvark"]).await;
    app.put_team("zebra", &["ns-zebra"]).await;
    for month in ["2026-09", "2026-10"] {
        let mut windows = Vec::new();
        for h in 0..6 {
            let s = format!("{month}-02T{h:02}:00:00Z");
            let e = format!("{month}-02T{:02}:00:00Z", h + 1);
            windows.push(window(
                MIG_3G,
                &s,
                &e,
                "ns-aardvark",
                "pod-aardvark",
                3600.0,
            ));
            windows.push(window(MIG_1G_A, &s, &e, "ns-zebra", "pod-zebra", 3600.0));
        }
        let b = batch(
            &format!("{month}-02T00:00:00Z"),
            &format!("{month}-03T00:00:00Z"),
            windows,
        );
        let r = app.ingest(&app.admin, &b).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
}

async fn run_as_admin(app: &TestApp, period: &str) -> Reply {
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/invoices/runs",
            &json!({"period": period}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    r
}

#[tokio::test]
// long: the matrix is one table, a row per route and caller, read whole
async fn every_route_answers_every_caller_as_the_matrix_says_and_no_team_sees_another() {
    let app = TestApp::spawn().await;
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    two_teams(&app).await;
    // October is issued for both teams; September stays a draft.
    let october = run_as_admin(&app, "2026-10").await;
    let zebra_invoice = draft_of(&october, "zebra")["id"].clone();
    for team in ["aardvark", "zebra"] {
        let r = issue(&app, &draft_of(&october, team)["id"]).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    let september = run_as_admin(&app, "2026-09").await;
    let aardvark_draft = draft_of(&september, "aardvark")["id"].clone();

    let revoked = app.token(Role::Admin, None, None).await;
    let id: i64 = revoked.split('_').nth(1).unwrap().parse().unwrap();
    let out = app.cli(&["token", "revoke", &id.to_string()]);
    assert!(out.status.success(), "{out:?}");
    let (_, expired) = slicemeter::auth::store::create(
        &app.pool,
        Role::Admin,
        None,
        None,
        Some("expired"),
        Some(chrono::Utc::now() - chrono::Duration::seconds(1)),
        &slicemeter::domain::access::Actor::CLI,
    )
    .await
    .unwrap();
    let tokens: [Option<String>; 10] = [
        None,
        Some("smt_not-a-token".into()),
        Some(revoked),
        Some(expired),
        Some(app.admin.clone()),
        Some(app.token(Role::Finance, None, None).await),
        Some(app.token(Role::TeamLead, Some("aardvark"), None).await),
        Some(app.token(Role::TeamLead, Some("zebra"), None).await),
        Some(app.token(Role::Collector, None, Some("gpu-node-01")).await),
        Some(app.token(Role::Importer, None, None).await),
    ];

    const PUBLIC: [u16; 10] = [200; 10];
    const U: u16 = 401;
    let matrix = vec![
        row("GET", "/healthz", "/healthz", PUBLIC),
        row("GET", "/readyz", "/readyz", PUBLIC),
        row("GET", "/metrics", "/metrics", PUBLIC),
        row(
            "GET",
            "/v1/audit",
            "/v1/audit",
            [U, U, U, U, 200, 200, 403, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/exports/erp",
            "/v1/exports/erp?period=2026-10",
            [U, U, U, U, 200, 200, 403, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/exports/focus",
            "/v1/exports/focus?period=2026-10",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        row(
            "GET",
            "/v1/fleet",
            "/v1/fleet",
            [U, U, U, U, 200, 200, 403, 403, 403, 403],
        ),
        with_body(
            row(
                "PUT",
                "/v1/gpus/{uuid}",
                format!("/v1/gpus/{H100}"),
                [U, U, U, U, 200, 403, 403, 403, 403, 403],
            ),
            // Registered to the node it is on: the matrix's other calls go on as before.
            |_| json!({"node": "gpu-node-01"}),
        ),
        // October is issued: its days come from the books.
        row(
            "GET",
            "/v1/gpus/{uuid}/ledger",
            format!("/v1/gpus/{H100}/ledger?from=2026-10-01&to=2026-10-08"),
            [U, U, U, U, 200, 200, 403, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/ingest/coverage",
            "/v1/ingest/coverage?node=gpu-node-01&from=2026-10-01T00:00:00Z&to=2026-10-08T00:00:00Z",
            [U, U, U, U, 200, 403, 403, 403, 200, 200],
        ),
        with_body(
            row(
                "POST",
                "/v1/ingest",
                "/v1/ingest",
                [U, U, U, U, 200, 403, 403, 403, 200, 200],
            ),
            |_| {
                batch(
                    "2026-10-05T00:00:00Z",
                    "2026-10-05T01:00:00Z",
                    vec![window(
                        MIG_1G_B,
                        "2026-10-05T00:00:00Z",
                        "2026-10-05T01:00:00Z",
                        "ns-zebra",
                        "pod-zebra-2",
                        3600.0,
                    )],
                )
            },
        ),
        row(
            "GET",
            "/v1/invoices",
            "/v1/invoices?period=2026-10",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        with_body(
            row(
                "POST",
                "/v1/invoices/runs",
                "/v1/invoices/runs",
                [U, U, U, U, 200, 200, 403, 403, 403, 403],
            ),
            |_| json!({"period": "2026-08"}),
        ),
        with_body(
            row(
                "POST",
                "/v1/invoices/issue",
                "/v1/invoices/issue",
                // August has no drafts: refused to everyone allowed to ask.
                [U, U, U, U, 409, 409, 403, 403, 403, 403],
            ),
            |_| json!({"period": "2026-08"}),
        ),
        row(
            "GET",
            "/v1/invoices/{id}",
            format!("/v1/invoices/{zebra_invoice}"),
            [U, U, U, U, 200, 200, 404, 200, 403, 403],
        ),
        with_body(
            row(
                "POST",
                "/v1/invoices/{id}/credit",
                format!("/v1/invoices/{aardvark_draft}/credit"),
                [U, U, U, U, 409, 409, 403, 403, 403, 403],
            ),
            |_| json!({}),
        ),
        with_body(
            row(
                "POST",
                "/v1/invoices/{id}/issue",
                format!("/v1/invoices/{zebra_invoice}/issue"),
                [U, U, U, U, 409, 409, 403, 403, 403, 403],
            ),
            |_| json!({}),
        ),
        row(
            "GET",
            "/v1/plans/consolidation",
            "/v1/plans/consolidation?days=14",
            [U, U, U, U, 200, 200, 403, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/plans/consolidation/mig-parted.yaml",
            "/v1/plans/consolidation/mig-parted.yaml",
            [U, U, U, U, 200, 200, 403, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/rate-cards",
            "/v1/rate-cards",
            [U, U, U, U, 200, 200, 403, 403, 403, 200],
        ),
        with_body(
            row(
                "POST",
                "/v1/rate-cards",
                "/v1/rate-cards",
                [U, U, U, U, 201, 201, 403, 403, 403, 403],
            ),
            // Each caller publishes a later version: a version is never edited.
            |i| {
                json!({"effective_from": format!("2027-01-{:02}T00:00:00Z", i + 1), "currency": "USD",
                       "default_hourly_cost": "3.00", "prices": {"NVIDIA H100 80GB HBM3": "4.00"}})
            },
        ),
        row(
            "GET",
            "/v1/tokens",
            "/v1/tokens",
            [U, U, U, U, 200, 403, 403, 403, 403, 403],
        ),
        with_body(
            row(
                "POST",
                "/v1/tokens",
                "/v1/tokens",
                [U, U, U, U, 201, 403, 403, 403, 403, 403],
            ),
            |_| json!({"role": "finance", "label": "the matrix"}),
        ),
        row(
            "DELETE",
            "/v1/tokens/{id}",
            // No such token: the matrix's callers keep theirs.
            "/v1/tokens/999999",
            [U, U, U, U, 404, 403, 403, 403, 403, 403],
        ),
        // Unit definitions are the admin's; the unit cost is read as the usage report is (this
        // server has no Prometheus for units: 502 once the caller may ask).
        with_body(
            row(
                "PUT",
                "/v1/unit-definitions/{name}",
                "/v1/unit-definitions/generated_tokens",
                [U, U, U, U, 201, 403, 403, 403, 403, 403],
            ),
            |_| json!({"expression": "vllm:generation_tokens_total", "model_label": "model_name"}),
        ),
        row(
            "GET",
            "/v1/unit-definitions",
            "/v1/unit-definitions",
            [U, U, U, U, 200, 403, 403, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/unit-definitions/{name}",
            "/v1/unit-definitions/generated_tokens",
            [U, U, U, U, 200, 403, 403, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/reports/unit-cost",
            "/v1/reports/unit-cost?from=2026-10-01&to=2026-10-08&unit=generated_tokens",
            [U, U, U, U, 409, 409, 409, 409, 403, 403],
        ),
        row(
            "DELETE",
            "/v1/unit-definitions/{name}",
            "/v1/unit-definitions/generated_tokens",
            [U, U, U, U, 204, 403, 403, 403, 403, 403],
        ),
        row(
            "DELETE",
            "/v1/rate-cards/{version}",
            "/v1/rate-cards/1",
            // Version 1 is in force: refused to everyone allowed to ask.
            [U, U, U, U, 409, 409, 403, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/recommendations",
            "/v1/recommendations?days=14",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        // Admin makes aardvark's budget; finance then finds it made.
        with_body(
            row(
                "POST",
                "/v1/budgets",
                "/v1/budgets",
                [U, U, U, U, 201, 409, 403, 403, 403, 403],
            ),
            |_| {
                json!({"team": "aardvark", "amount": "100.00", "currency": "USD",
                       "thresholds": [{"kind": "forecast", "percent": 100}]})
            },
        ),
        row(
            "GET",
            "/v1/budgets",
            "/v1/budgets",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        row(
            "GET",
            "/v1/budgets/{id}",
            "/v1/budgets/999999",
            [U, U, U, U, 404, 404, 404, 404, 403, 403],
        ),
        with_body(
            row(
                "PUT",
                "/v1/budgets/{id}",
                "/v1/budgets/999999",
                [U, U, U, U, 404, 404, 403, 403, 403, 403],
            ),
            |_| {
                json!({"amount": "100.00", "currency": "USD",
                       "thresholds": [{"kind": "actual", "percent": 80}]})
            },
        ),
        row(
            "DELETE",
            "/v1/budgets/{id}",
            "/v1/budgets/999999",
            [U, U, U, U, 404, 404, 403, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/reports/forecast",
            "/v1/reports/forecast",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        row(
            "GET",
            "/v1/alerts",
            "/v1/alerts",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        // A lead naming another team is refused, not narrowed.
        row(
            "GET",
            "/v1/alerts",
            "/v1/alerts?team=aardvark",
            [U, U, U, U, 200, 200, 200, 403, 403, 403],
        ),
        // A lead naming another team is refused, not narrowed.
        row(
            "GET",
            "/v1/reports/forecast",
            "/v1/reports/forecast?team=aardvark",
            [U, U, U, U, 200, 200, 200, 403, 403, 403],
        ),
        row(
            "GET",
            "/v1/reports/monthly/{period}",
            "/v1/reports/monthly/2026-10",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        row(
            "GET",
            "/v1/reports/usage",
            "/v1/reports/usage?from=2026-10-01&to=2026-10-08",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        // Grouped down to pods, a lead's rows are still only their team's.
        row(
            "GET",
            "/v1/reports/usage",
            "/v1/reports/usage?from=2026-09-01&to=2026-11-01&group_by=team,namespace,workload,pod&step=month",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        row(
            "GET",
            "/allocation",
            "/allocation?window=2026-10-01T00:00:00Z,2026-11-01T00:00:00Z&aggregate=namespace,pod",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        row(
            "GET",
            "/allocation/compute",
            "/allocation/compute?window=2026-09-01T00:00:00Z,2026-11-01T00:00:00Z&aggregate=cluster,namespace&step=month",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        row(
            "GET",
            "/v1/teams",
            "/v1/teams",
            [U, U, U, U, 200, 200, 200, 200, 403, 403],
        ),
        row(
            "GET",
            "/v1/teams/{team}",
            "/v1/teams/zebra",
            [U, U, U, U, 200, 200, 403, 200, 403, 403],
        ),
        with_body(
            row(
                "PUT",
                "/v1/teams/{team}",
                "/v1/teams/zebra",
                [U, U, U, U, 200, 200, 403, 403, 403, 403],
            ),
            |_| json!({"namespaces": ["ns-zebra"], "cost_center": "CC-zebra", "gl_account": "6420"}),
        ),
    ];

    // The matrix and the document list the same routes.
    let doc = serde_json::to_value(slicemeter::http::openapi()).unwrap();
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.to_uppercase(), path.clone()))
        })
        .collect();
    let listed: BTreeSet<(String, String)> = matrix
        .iter()
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect();
    assert_eq!(
        documented.difference(&listed).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "routes without an entry in the authorization matrix"
    );
    assert_eq!(
        listed.difference(&documented).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "matrix entries for routes the OpenAPI document does not have"
    );

    let mut wrong = Vec::new();
    for r in &matrix {
        for (i, token) in tokens.iter().enumerate() {
            let mut req = Request::builder().method(r.method).uri(&r.uri);
            if let Some(t) = token {
                req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
            }
            let body = match &r.body {
                Some(b) => {
                    req = req.header(header::CONTENT_TYPE, "application/json");
                    Body::from(serde_json::to_vec(&b(i)).unwrap())
                }
                None => Body::empty(),
            };
            let reply = app.request(req.body(body).unwrap()).await;
            if reply.status.as_u16() != r.expect[i] {
                wrong.push(format!(
                    "{} {} as {}: expected {}, got {reply:?}",
                    r.method, r.uri, CALLERS[i], r.expect[i]
                ));
            }
            if reply.status == StatusCode::UNAUTHORIZED {
                assert_eq!(
                    reply.headers[header::WWW_AUTHENTICATE],
                    "Bearer",
                    "{} {}",
                    r.method,
                    r.uri
                );
            }
            // What one team lead reads never names the other team, its namespace or its pods.
            let text = reply.body.to_string();
            let other = match i {
                LEAD_A => Some("zebra"),
                LEAD_B => Some("aardvark"),
                _ => None,
            };
            if let Some(other) = other {
                assert!(
                    !text.contains(other),
                    "{} {} as {} shows {other}'s data: {text}",
                    r.method,
                    r.uri,
                    CALLERS[i]
                );
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} calls got the wrong status:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    // A team lead asking for the other team by name is refused, not silently narrowed.
    let lead_a = tokens[LEAD_A].as_deref();
    let r = app.get(lead_a, "/v1/invoices?team=zebra").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    // A collector ingests only for its own node.
    let mut other_node = batch("2026-10-06T00:00:00Z", "2026-10-06T01:00:00Z", Vec::new());
    other_node["node"] = json!("gpu-node-02");
    let r = app.ingest(tokens[8].as_deref().unwrap(), &other_node).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    let r = app
        .get(
            tokens[8].as_deref(),
            "/v1/ingest/coverage?node=gpu-node-02&from=2026-10-01T00:00:00Z&to=2026-10-02T00:00:00Z",
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    // An importer ingests for any node (a back-fill sends every node's batches), but a GPU still
    // belongs to the node that first reported it.
    let r = app.ingest(tokens[9].as_deref().unwrap(), &other_node).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    assert_eq!(r.body["error"]["code"], "not_this_nodes_gpu", "{r:?}");
    // The docs are public.
    for uri in ["/openapi.json", "/docs/"] {
        assert_eq!(app.get(None, uri).await.status, StatusCode::OK, "{uri}");
    }
}

#[tokio::test]
async fn a_token_expires_at_its_instant_and_is_refused_from_then_on() {
    let app = TestApp::spawn().await;
    let (_, token) = slicemeter::auth::store::create(
        &app.pool,
        Role::Finance,
        None,
        None,
        Some("short-lived"),
        Some(chrono::Utc::now() + chrono::Duration::seconds(2)),
        &slicemeter::domain::access::Actor::CLI,
    )
    .await
    .unwrap();
    assert_eq!(
        app.get(Some(&token), "/v1/teams").await.status,
        StatusCode::OK
    );
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let r = app.get(Some(&token), "/v1/teams").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{r:?}");
    assert_eq!(
        r.body["error"]["message"],
        "the token is invalid, revoked or expired"
    );
    // The CLI's --expires-in sets the instant: an hour from now.
    let out = app.cli(&["token", "create", "--role", "finance", "--expires-in", "1h"]);
    assert!(out.status.success(), "{out:?}");
    let fresh = String::from_utf8(out.stdout).unwrap();
    let fresh = fresh
        .split_whitespace()
        .find(|w| w.starts_with("smt_"))
        .unwrap();
    assert_eq!(
        app.get(Some(fresh), "/v1/teams").await.status,
        StatusCode::OK
    );
    let expires: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select expires_at from api_token where api_token_id = $1")
            .bind(fresh.split('_').nth(1).unwrap().parse::<i64>().unwrap())
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let left = expires - chrono::Utc::now();
    assert!(
        left > chrono::Duration::minutes(59) && left <= chrono::Duration::hours(1),
        "{left}"
    );
}

#[tokio::test]
async fn a_request_without_a_bearer_scheme_is_refused_like_no_token() {
    let app = TestApp::spawn().await;
    let r = app
        .request(
            Request::get("/v1/teams")
                .header(header::AUTHORIZATION, format!("Basic {}", app.admin))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{r:?}");
}
