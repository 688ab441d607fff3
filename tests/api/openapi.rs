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
