//! `GET /v1/teams`, `PUT /v1/teams/{team}` and attribution of consumers to teams.

use axum::http::StatusCode;
use serde_json::{Value, json};
use slicemeter::domain::access::Role;

use crate::support::*;

#[tokio::test]
async fn a_team_label_wins_over_the_namespace_and_unknown_namespaces_stay_unattributed() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    let mut labelled = window(
        MIG_1G_A,
        "2026-10-01T00:00:00Z",
        "2026-10-01T00:01:00Z",
        "nlp",
        "x",
        60.0,
    );
    labelled["consumer"]["labels"] = json!({"team": "search"});
    let b = batch(
        "2026-10-01T00:00:00Z",
        "2026-10-01T00:01:00Z",
        vec![
            window(
                MIG_3G,
                "2026-10-01T00:00:00Z",
                "2026-10-01T00:01:00Z",
                "nlp",
                "a",
                60.0,
            ),
            labelled,
            window(
                MIG_1G_B,
                "2026-10-01T00:00:00Z",
                "2026-10-01T00:01:00Z",
                "sandbox",
                "c",
                60.0,
            ),
        ],
    );
    assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);
    let teams: Vec<(String, String)> = sqlx::query_as(
        "select distinct c.pod, u.team_id from consumer c join usage_hourly u using (consumer_id)
         order by c.pod",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        teams,
        vec![
            ("a".into(), "nlp".into()),
            ("c".into(), "unattributed".into()),
            ("x".into(), "search".into())
        ]
    );
    // A team named by a label is created so that its usage is never lost.
    let r = app.get(Some(&app.admin), "/v1/teams").await;
    let ids: Vec<&str> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["team"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["nlp", "search", "unattributed"]);
}

#[tokio::test]
async fn a_namespace_belongs_to_one_team() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp", "shared"]).await;
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/vision",
            &json!({"namespaces": ["vision", "shared"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{r:?}");
    assert_eq!(
        r.body["error"]["message"],
        "namespace \"shared\" belongs to team \"nlp\"; remove it there first"
    );
    let r = app.get(Some(&app.admin), "/v1/teams").await;
    assert!(
        r.body
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["team"] != "vision"),
        "nothing stored: {r:?}"
    );
}

#[tokio::test]
async fn invalid_team_updates_name_each_field() {
    let app = TestApp::spawn().await;
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/NLP%20Team",
            &json!({"namespaces": ["a", "a", ""]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    let fields: Vec<&str> = r.body["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, vec!["team", "namespaces[1]", "namespaces[2]"]);
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/nlp",
            &json!({"namespaces": "nlp"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(r.body["error"]["code"], "malformed_body");
}

#[tokio::test]
async fn team_leads_see_only_their_team_and_cannot_change_teams() {
    let app = TestApp::spawn().await;
    app.put_team("vision", &["vision"]).await;
    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let r = app.get(Some(&lead), "/v1/teams").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body.as_array().unwrap().len(), 1);
    assert_eq!(r.body[0]["team"], "nlp");
    assert!(!r.body.to_string().contains("vision"));
    let r = app
        .send_json(
            "PUT",
            Some(&lead),
            "/v1/teams/nlp",
            &json!({"namespaces": ["vision"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    let finance = app.token(Role::Finance, None, None).await;
    let r = app
        .send_json(
            "PUT",
            Some(&finance),
            "/v1/teams/nlp",
            &json!({"cost_center": "CC-1", "gl_account": "6420"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["cost_center"], "CC-1");
}

#[tokio::test]
async fn a_put_with_only_a_cost_center_changes_only_the_cost_center() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp", "nlp-batch"]).await;
    let (s, e, windows) = minute_windows(3);
    assert_eq!(
        app.ingest(&app.admin, &batch(&s, &e, windows)).await.status,
        StatusCode::OK
    );
    let attributed = "select count(distinct consumer_id) from usage_hourly where team_id = 'nlp'";
    assert_eq!(app.count(attributed).await, 3);
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/nlp",
            &json!({"cost_center": "CC-9"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["cost_center"], "CC-9");
    assert_eq!(r.body["gl_account"], "6420", "left out: unchanged");
    assert_eq!(r.body["namespaces"], json!(["nlp", "nlp-batch"]));
    assert_eq!(r.body["reattributed_consumers"], 0);
    assert_eq!(app.count(attributed).await, 3, "nothing re-attributed");
    // null clears a field; an empty list is the way to give up every namespace.
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/nlp",
            &json!({"gl_account": null}),
        )
        .await;
    assert_eq!(r.body["gl_account"], Value::Null);
    assert_eq!(r.body["cost_center"], "CC-9");
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/nlp",
            &json!({"namespaces": []}),
        )
        .await;
    assert_eq!(r.body["namespaces"], json!([]));
    assert_eq!(r.body["namespaces_removed"], json!(["nlp", "nlp-batch"]));
    // From now on: what the consumers held before stays nlp's.
    assert_eq!(r.body["reattributed_consumers"], 0);
    assert_eq!(app.count(attributed).await, 3);
    // An array is not a team, though its items would line up with the fields.
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/nlp",
            &json!([null, null]),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(r.body["error"]["message"], "the body must be a JSON object");
    let now = app.get(Some(&app.admin), "/v1/teams").await;
    assert_eq!(now.body[0]["cost_center"], "CC-9");
    // A misspelt field is refused, not ignored.
    let r = app
        .send_json(
            "PUT",
            Some(&app.admin),
            "/v1/teams/nlp",
            &json!({"namespace": ["nlp"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `namespace`"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_teams_claiming_one_namespace_at_once_get_one_200_and_one_409_naming_the_owner() {
    let app = TestApp::spawn().await;
    for round in 0..8 {
        let ns = format!("contested-{round}");
        let body = json!({"namespaces": [ns.clone()]});
        let (uri_a, uri_b) = ("/v1/teams/alpha", "/v1/teams/beta");
        let claim = |uri: &'static str| app.send_json("PUT", Some(&app.admin), uri, &body);
        let (a, b) = tokio::join!(claim(uri_a), claim(uri_b));
        let mut statuses = [a.status.as_u16(), b.status.as_u16()];
        statuses.sort();
        assert_eq!(statuses, [200, 409], "round {round}: {a:?} {b:?}");
        let (winner, loser) = if a.status == StatusCode::OK {
            ("alpha", &b)
        } else {
            ("beta", &a)
        };
        assert_eq!(loser.body["error"]["code"], "namespace_taken");
        let message = loser.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("namespace {ns:?} belongs to team \"{winner}\"")),
            "{message}"
        );
        let owners: Vec<String> =
            sqlx::query_scalar("select team_id from team_namespace_now where namespace = $1")
                .bind(&ns)
                .fetch_all(&app.pool)
                .await
                .unwrap();
        assert_eq!(owners, vec![winner.to_owned()]);
    }
}
