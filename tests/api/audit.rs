//! The audit log and the limits: who changed what money depends on, an append-only record of it,
//! and the clear refusals of a server protecting itself (429 with Retry-After, bounded ranges).

use axum::http::StatusCode;
use serde_json::{Value, json};
use slicemeter::domain::access::Role;
use slicemeter::http::state::ServerConfig;

use crate::billing::{draft_of, issue, rate_card, run, worked_example};
use crate::support::*;

fn actions(list: &Reply) -> Vec<(String, String, String)> {
    list.body
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list:?}"))
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["subject"].as_str().unwrap().to_owned(),
                e["actor_role"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn every_change_money_depends_on_is_audited_and_the_log_cannot_be_rewritten() {
    let app = TestApp::spawn().await;
    let finance = app.token(Role::Finance, None, None).await;
    let finance_id: i64 = finance.split('_').nth(1).unwrap().parse().unwrap();
    rate_card(&app, "2026-09-01T00:00:00Z", "4.00").await;
    worked_example(&app, "2026-09-01", 1).await;
    let drafts = run(&app, "2026-09").await;
    let nlp = draft_of(&drafts, "nlp")["id"].clone();
    let issued = issue(&app, &nlp).await;
    assert_eq!(issued.status, StatusCode::OK, "{issued:?}");
    let number = issued.body["number"].as_str().unwrap().to_owned();
    // Finance credits it: the entry names the finance token.
    let note = app
        .send_json(
            "POST",
            Some(&finance),
            &format!("/v1/invoices/{nlp}/credit"),
            &json!({}),
        )
        .await;
    assert_eq!(note.status, StatusCode::OK, "{note:?}");
    let revoked = app.token(Role::Collector, None, Some("gpu-node-09")).await;
    let revoked_id: i64 = revoked.split('_').nth(1).unwrap().parse().unwrap();
    slicemeter::auth::store::revoke(
        &app.pool,
        revoked_id,
        &slicemeter::domain::access::Actor::CLI,
    )
    .await
    .unwrap();

    let log = app.get(Some(&finance), "/v1/audit?limit=1000").await;
    assert_eq!(log.status, StatusCode::OK, "{log:?}");
    let mut got = actions(&log);
    got.reverse(); // oldest first
    let want_in_order = [
        ("token.create", finance_id.to_string(), "cli"),
        ("rate_card.publish", "v1".to_owned(), "admin"),
        ("team.put", "nlp".to_owned(), "admin"),
        ("team.put", "search".to_owned(), "admin"),
        ("team.put", "vision".to_owned(), "admin"),
        ("invoice.run", "2026-09".to_owned(), "admin"),
        ("invoice.issue", number.clone(), "admin"),
        (
            "invoice.credit",
            note.body["number"].as_str().unwrap().to_owned(),
            "finance",
        ),
        ("token.create", revoked_id.to_string(), "cli"),
        ("token.revoke", revoked_id.to_string(), "cli"),
    ];
    // The test admin's own token comes first; everything after is this test's, in order.
    let after_admin: Vec<_> = got
        .iter()
        .skip_while(|(a, s, _)| !(a == "token.create" && *s == finance_id.to_string()))
        .map(|(a, s, r)| (a.as_str(), s.clone(), r.as_str()))
        .collect();
    assert_eq!(
        after_admin,
        want_in_order
            .iter()
            .map(|(a, s, r)| (*a, s.clone(), *r))
            .collect::<Vec<_>>()
    );
    let entries = log.body.as_array().unwrap();
    let credit = entries
        .iter()
        .find(|e| e["action"] == "invoice.credit")
        .unwrap();
    assert_eq!(credit["actor_token_id"], json!(finance_id));
    assert_eq!(credit["details"]["voids"], json!(number));
    let publish = entries
        .iter()
        .find(|e| e["action"] == "rate_card.publish")
        .unwrap();
    assert_eq!(
        publish["details"]["prices"]["NVIDIA H100 80GB HBM3"],
        "4.00"
    );

    // Filters: one action, a window of time, a limit.
    let only = app
        .get(Some(&app.admin), "/v1/audit?action=invoice.issue")
        .await;
    assert_eq!(
        actions(&only),
        vec![(
            "invoice.issue".to_owned(),
            number.clone(),
            "admin".to_owned()
        )]
    );
    let none = app
        .get(Some(&app.admin), "/v1/audit?to=2000-01-01T00:00:00Z")
        .await;
    assert_eq!(none.status, StatusCode::OK, "{none:?}");
    assert_eq!(none.body, json!([]));
    assert_eq!(
        app.get(Some(&app.admin), "/v1/audit?limit=2")
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let bad = app
        .get(
            Some(&app.admin),
            "/v1/audit?action=invoice.delete&limit=5000&from=yesterday",
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{bad:?}");
    let fields: Vec<&str> = bad.body["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, vec!["from", "action", "limit"], "{bad:?}");

    // Neither UPDATE, DELETE nor TRUNCATE gets past the database's triggers, as any role.
    let rows = app.count("select count(*) from audit_log").await;
    for sql in [
        "update audit_log set actor_role = 'admin'",
        "update audit_log set details = '{}' where action = 'invoice.credit'",
        "delete from audit_log",
        "truncate audit_log",
    ] {
        let err = sqlx::query(sql).execute(&app.pool).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
    assert_eq!(app.count("select count(*) from audit_log").await, rows);
    // A team lead and a collector may not read it.
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    assert_eq!(
        app.get(Some(&lead), "/v1/audit").await.status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn ingest_beyond_a_tokens_rate_gets_429_with_retry_after_and_loses_nothing_on_retry() {
    let app = TestApp::with_config(ServerConfig {
        ingest_rate: 1.0,
        ingest_burst: 3.0,
        ..test_config()
    })
    .await;
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    let (s, e, windows) = minute_windows(6);
    let b = batch(&s, &e, windows);
    let mut statuses = Vec::new();
    let mut refused: Option<Reply> = None;
    for _ in 0..5 {
        let r = app.ingest(&collector, &b).await;
        statuses.push(r.status.as_u16());
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            refused.get_or_insert(r);
        }
    }
    assert_eq!(statuses, vec![200, 200, 200, 429, 429]);
    let refused = refused.unwrap();
    let wait: u64 = refused.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&wait), "{wait}");
    assert_eq!(refused.body["error"]["code"], "rate_limited");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("at most 1 a second (bursts of 3)"),
        "{message}"
    );
    // Limits are per token: another node's collector is not held back by this one.
    let other = app.token(Role::Collector, None, Some("gpu-node-02")).await;
    // (Its own node and GPUs: the first node's GPU is not another node's to report.)
    let b2 = json!({"node": "gpu-node-02", "period": b["period"].clone()});
    let r = app.ingest(&other, &b2).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    // After the wait the same token is let in again; the windows were stored once.
    tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
    let r = app.ingest(&collector, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body, json!({"inserted": 0, "duplicates": 6}));
}

#[tokio::test]
async fn report_ranges_are_bounded_with_an_error_that_says_what_to_do() {
    let app = TestApp::spawn().await;
    let r = app
        .get(
            Some(&app.admin),
            "/v1/reports/usage?from=2025-01-01&to=2026-10-01&step=hour",
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    let field: &Value = &r.body["error"]["fields"][0];
    assert_eq!(field["field"], "to");
    assert!(
        field["message"]
            .as_str()
            .unwrap()
            .contains("use a coarser step or a shorter range"),
        "{r:?}"
    );
}
