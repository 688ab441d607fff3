//! `/v1/tokens` (issue 15, item 5): tokens made over the API work at once, are listed without their
//! secret, and get 401 once revoked.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::json;
use slicemeter::domain::access::Role;

use crate::support::*;

async fn post(app: &TestApp, token: &str, body: serde_json::Value) -> Reply {
    app.send_json("POST", Some(token), "/v1/tokens", &body)
        .await
}

async fn delete(app: &TestApp, token: &str, uri: &str) -> Reply {
    app.request(
        Request::delete(uri)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn a_token_made_over_the_api_works_is_listed_without_its_secret_and_is_refused_once_revoked()
{
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    app.put_team("search", &["search"]).await;
    let r = post(
        &app,
        &app.admin,
        json!({"role": "team_lead", "team": "nlp", "label": "nlp's dashboard",
                    "expires_at": "2099-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let lead = r.body["token"].as_str().unwrap().to_owned();
    let id = r.body["id"].as_i64().unwrap();
    assert!(lead.starts_with(&format!("smt_{id}_")), "{lead}");
    assert_eq!(r.body["role"], "team_lead");
    assert_eq!(r.body["team"], "nlp");
    assert_eq!(r.body["expires_at"], "2099-01-01T00:00:00Z");

    // It works at once, as a team lead of nlp: its own team only.
    let teams = app.get(Some(&lead), "/v1/teams").await;
    assert_eq!(teams.status, StatusCode::OK, "{teams:?}");
    let names: Vec<&str> = teams
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["team"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nlp"]);
    assert_eq!(
        app.get(Some(&lead), "/v1/tokens").await.status,
        StatusCode::FORBIDDEN
    );

    // The list has it, and no secret of any token.
    let list = app.get(Some(&app.admin), "/v1/tokens").await;
    assert_eq!(list.status, StatusCode::OK, "{list:?}");
    let text = list.body.to_string();
    let secret = lead.rsplit('_').next().unwrap();
    assert!(!text.contains(secret), "{text}");
    let admin_secret = app.admin.rsplit('_').next().unwrap();
    assert!(!text.contains(admin_secret), "{text}");
    let row = list
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap();
    assert_eq!(row["label"], "nlp's dashboard");
    assert!(row["revoked_at"].is_null());
    assert!(row.get("token").is_none(), "{row}");

    // Revoked: 401 from then on, on the record; a second revoke finds nothing to revoke.
    assert_eq!(
        delete(&app, &app.admin, &format!("/v1/tokens/{id}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(Some(&lead), "/v1/teams").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        delete(&app, &app.admin, &format!("/v1/tokens/{id}"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        delete(&app, &app.admin, "/v1/tokens/not-a-number")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let list = app.get(Some(&app.admin), "/v1/tokens").await;
    let row = list
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap();
    assert!(!row["revoked_at"].is_null(), "{row}");
    let audit = app
        .get(Some(&app.admin), "/v1/audit?action=token.revoke")
        .await;
    assert_eq!(audit.status, StatusCode::OK, "{audit:?}");
    assert!(
        audit.body.to_string().contains(&id.to_string()),
        "{audit:?}"
    );

    // A collector token made here ingests for its node.
    let r = post(
        &app,
        &app.admin,
        json!({"role": "collector", "node": "gpu-node-01"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let collector = r.body["token"].as_str().unwrap().to_owned();
    let (start, end, windows) = minute_windows(3);
    let r = app.ingest(&collector, &batch(&start, &end, windows)).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

#[tokio::test]
async fn a_bad_token_request_names_each_bad_field_and_only_an_admin_may_make_one() {
    let app = TestApp::spawn().await;
    let fields = |r: &Reply| -> Vec<String> {
        r.body["error"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field"].as_str().unwrap().to_owned())
            .collect()
    };
    let r = post(
        &app,
        &app.admin,
        json!({"role": "admin", "team": "nlp", "node": "bad node", "label": "",
                    "expires_at": "2001-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(fields(&r), ["role", "team", "node", "label", "expires_at"]);
    let r = post(
        &app,
        &app.admin,
        json!({"role": "team_lead", "team": "no-such-team"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(fields(&r), ["team"]);
    assert!(
        r.body["error"]["fields"][0]["message"]
            .as_str()
            .unwrap()
            .contains("there is no team \"no-such-team\""),
        "{r:?}"
    );
    let r = post(&app, &app.admin, json!({"role": "collector"})).await;
    assert_eq!(fields(&r), ["node"]);
    let finance = app.token(Role::Finance, None, None).await;
    let r = post(&app, &finance, json!({"role": "finance"})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    assert_eq!(
        delete(&app, &finance, "/v1/tokens/1").await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.get(None, "/v1/tokens").await.status,
        StatusCode::UNAUTHORIZED
    );
}

/// RFC 7235: the authentication scheme is case-insensitive, so `BEARER` and `bearer` are `Bearer`;
/// another scheme, or none, is refused with what to send.
#[tokio::test]
async fn the_bearer_scheme_is_accepted_in_any_case() {
    let app = TestApp::spawn().await;
    let with = |value: String| {
        Request::get("/v1/teams")
            .header(header::AUTHORIZATION, value)
            .body(Body::empty())
            .unwrap()
    };
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let r = app.request(with(format!("{scheme} {}", app.admin))).await;
        assert_eq!(r.status, StatusCode::OK, "{scheme}: {r:?}");
    }
    for value in [
        format!("Basic {}", app.admin),
        app.admin.clone(),
        format!("Bearer{}", app.admin),
    ] {
        let r = app.request(with(value.clone())).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{value}: {r:?}");
        assert_eq!(
            r.body["error"]["message"], "the Authorization header must be Bearer <token>",
            "{r:?}"
        );
    }
}
