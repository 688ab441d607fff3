//! The committed OpenAPI document is the one the code describes.

use axum::http::StatusCode;

use crate::support::*;

#[test]
fn the_committed_openapi_document_matches_the_code() {
    let generated = slicemeter::http::openapi().to_pretty_json().unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed.trim_end() == generated.trim_end(),
        "openapi/openapi.json is stale: run `cargo run -- openapi > openapi/openapi.json`"
    );
}

#[tokio::test]
async fn the_document_is_served_without_a_token_and_lists_every_route() {
    let app = TestApp::spawn().await;
    let r = app.get(None, "/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    let paths: Vec<&String> = r.body["paths"].as_object().unwrap().keys().collect();
    for p in [
        "/v1/ingest",
        "/v1/reports/usage",
        "/v1/teams",
        "/v1/teams/{team}",
        "/v1/fleet",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(
            paths.iter().any(|x| x.as_str() == p),
            "{p} missing from {paths:?}"
        );
    }
    assert_eq!(
        r.body["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}

#[tokio::test]
async fn swagger_ui_is_served_from_the_binary_without_a_token_or_a_cdn() {
    let app = TestApp::spawn().await;
    let page = app.get(None, "/docs/").await;
    assert_eq!(page.status, StatusCode::OK, "{page:?}");
    let html = page.body.as_str().unwrap();
    assert!(html.contains("swagger-ui"), "{html}");
    assert!(
        !html.contains("https://"),
        "the page loads nothing from the network: {html}"
    );
    let init = app.get(None, "/docs/swagger-initializer.js").await;
    assert_eq!(init.status, StatusCode::OK);
    assert!(init.body.as_str().unwrap().contains("/openapi.json"));
    let bundle = app.get(None, "/docs/swagger-ui-bundle.js").await;
    assert_eq!(bundle.status, StatusCode::OK);
}

#[tokio::test]
async fn the_document_lists_every_error_code_with_the_status_the_api_answers_it_with() {
    let app = TestApp::spawn().await;
    let doc = app.get(None, "/openapi.json").await.body;
    let schema = &doc["components"]["schemas"]["ErrorCode"];
    let codes: Vec<&str> = schema["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(codes.len() >= 20, "{codes:?}");
    let description = schema["description"].as_str().unwrap();
    // Each code once in the description, with a status; no code the enum lacks.
    // "...: `bad_request`: 400, `invalid_parameters`: 400, ...": a code, then its status.
    let parts: Vec<&str> = description.split('`').collect();
    let listed: Vec<(&str, u16)> = parts[1..]
        .chunks(2)
        .map(|p| {
            let status = p
                .get(1)
                .and_then(|s| s.get(2..5))
                .and_then(|s| s.parse().ok());
            (
                p[0],
                status.unwrap_or_else(|| panic!("no status after {}", p[0])),
            )
        })
        .collect();
    let names: Vec<&str> = listed.iter().map(|(c, _)| *c).collect();
    assert_eq!(names, codes, "{description}");
    // The statuses are the ones the API answers with.
    let status_of = |code: &str| listed.iter().find(|(c, _)| *c == code).unwrap().1;
    let r = app.get(None, "/v1/fleet").await;
    assert_eq!(r.body["error"]["code"], "unauthorized");
    assert_eq!(r.status.as_u16(), status_of("unauthorized"));
    let r = app.get(Some(&app.admin), "/v1/no-such-thing").await;
    assert_eq!(r.body["error"]["code"], "not_found");
    assert_eq!(r.status.as_u16(), status_of("not_found"));
    let r = app
        .get(Some(&app.admin), "/v1/reports/usage?from=yesterday")
        .await;
    let code = r.body["error"]["code"].as_str().unwrap().to_owned();
    assert_eq!(r.status.as_u16(), status_of(&code), "{r:?}");
    assert_eq!(status_of("payload_too_large"), 413);
    assert_eq!(status_of("invalid_batch"), 422);
}
