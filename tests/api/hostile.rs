//! Ingest as a thief with a collector token, or a broken collector, would use it: another node's
//! GPUs, figures no card can hold, two holders at once, overlapping re-sends, text and timestamps
//! that used to crash the handler. Each case: the exact status, the field named, and the stored data
//! unchanged.
//!
//! The file stays whole: the hostile cases are one catalogue, each a few lines on shared builders.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use slicemeter::domain::access::Role;

use crate::support::*;

/// What is stored: windows, their held seconds in the rollup, presence seconds.
async fn stored(app: &TestApp) -> (i64, i64, i64) {
    (
        app.count("select count(*) from occupancy").await,
        app.count("select coalesce(sum(held_seconds), 0)::int8 from usage_hourly")
            .await,
        app.count("select coalesce(sum(present_seconds), 0)::int8 from gpu_hourly")
            .await,
    )
}

async fn node_of(app: &TestApp, uuid: &str) -> String {
    sqlx::query_scalar("select node from gpu where gpu_uuid = $1")
        .bind(uuid)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

const T0: &str = "2026-10-01T00:00:00Z";
const T1: &str = "2026-10-01T00:01:00Z";
const T2: &str = "2026-10-01T00:02:00Z";

#[tokio::test]
async fn a_collector_cannot_take_over_another_nodes_gpu_and_an_admin_moves_it_on_the_record() {
    let app = TestApp::spawn().await;
    let node_1 = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    let node_2 = app.token(Role::Collector, None, Some("gpu-node-02")).await;
    let first = batch(T0, T1, vec![window(MIG_3G, T0, T1, "nlp", "a", 60.0)]);
    assert_eq!(app.ingest(&node_1, &first).await.status, StatusCode::OK);
    let before = stored(&app).await;

    // Node 2's token, node 2's name, node 1's GPU.
    let mut theft = batch(T1, T2, vec![window(MIG_3G, T1, T2, "evil", "x", 60.0)]);
    theft["node"] = json!("gpu-node-02");
    let r = app.ingest(&node_2, &theft).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    assert_eq!(r.body["error"]["code"], "not_this_nodes_gpu");
    let f = fields(&r);
    assert_eq!(f[0].0, "gpus[0].uuid");
    assert!(
        f[0].1
            .contains(&format!("{H100} belongs to node \"gpu-node-01\"")),
        "{f:?}"
    );
    assert_eq!(node_of(&app, H100).await, "gpu-node-01");
    assert_eq!(stored(&app).await, before);
    // The real node goes on as before (it used to get 409 from then on).
    let next = batch(T1, T2, vec![window(MIG_3G, T1, T2, "nlp", "a", 60.0)]);
    assert_eq!(app.ingest(&node_1, &next).await.status, StatusCode::OK);
    // An admin's back-fill follows the same registry.
    let mut backfill = batch(T2, "2026-10-01T00:03:00Z", vec![]);
    backfill["node"] = json!("gpu-node-02");
    assert_eq!(
        app.ingest(&app.admin, &backfill).await.status,
        StatusCode::FORBIDDEN
    );

    // Moving the card is an admin's act, audited.
    let finance = app.token(Role::Finance, None, None).await;
    let body = json!({"node": "gpu-node-02"});
    let uri = format!("/v1/gpus/{H100}");
    for (token, status) in [
        (&node_1, StatusCode::FORBIDDEN),
        (&finance, StatusCode::FORBIDDEN),
    ] {
        assert_eq!(
            app.send_json("PUT", Some(token), &uri, &body).await.status,
            status
        );
    }
    let bad = app
        .send_json("PUT", Some(&app.admin), &uri, &json!({"node": "no spaces"}))
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(field_names(&bad), vec!["node"]);
    let missing = app
        .send_json("PUT", Some(&app.admin), "/v1/gpus/GPU-nope", &body)
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let moved = app.send_json("PUT", Some(&app.admin), &uri, &body).await;
    assert_eq!(moved.status, StatusCode::OK, "{moved:?}");
    assert_eq!(moved.body["node"], "gpu-node-02");
    let audit = app.get(Some(&app.admin), "/v1/audit?action=gpu.move").await;
    assert_eq!(audit.body[0]["subject"], H100);
    assert_eq!(
        audit.body[0]["details"],
        json!({"from": "gpu-node-01", "to": "gpu-node-02"})
    );
    let mut after = batch(T2, "2026-10-01T00:03:00Z", vec![]);
    after["node"] = json!("gpu-node-02");
    assert_eq!(app.ingest(&node_2, &after).await.status, StatusCode::OK);
    let old = batch("2026-10-01T00:03:00Z", "2026-10-01T00:04:00Z", vec![]);
    assert_eq!(
        app.ingest(&node_1, &old).await.status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn the_cli_moves_a_gpu_on_the_record() {
    let app = TestApp::spawn().await;
    let b = batch(T0, T1, vec![]);
    assert_eq!(app.ingest(&app.admin, &b).await.status, StatusCode::OK);
    let out = app.cli(&["gpu", "move", H100, "--node", "gpu-node-09"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(node_of(&app, H100).await, "gpu-node-09");
    assert_eq!(
        app.count(
            "select count(*) from audit_log where action = 'gpu.move' and actor_role = 'cli'"
        )
        .await,
        1
    );
    let out = app.cli(&["gpu", "move", "GPU-none", "--node", "gpu-node-09"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("there is no GPU GPU-none"));
}

/// A batch of one whole H100 (`GPU-W`) with the given slices and windows.
fn whole_batch(slices: Value, windows: Vec<Value>) -> Value {
    json!({"node": "gpu-node-01", "period": {"start": T0, "end": T1},
           "gpus": [{"uuid": "GPU-W", "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
                     "compute_slices": 7, "memory_slices": 8, "mig_enabled": false}],
           "slices": slices, "windows": windows})
}

fn held(slice: &str, pod: &str, held: f64) -> Value {
    window(slice, T0, T1, "nlp", pod, held)
}

async fn refused(app: &TestApp, b: &Value, status: StatusCode) -> Reply {
    let before = stored(app).await;
    let r = app.ingest(&app.admin, b).await;
    assert_eq!(r.status, status, "{r:?}");
    assert!(r.body["error"]["message"].is_string(), "{r:?}");
    assert_eq!(stored(app).await, before, "a refused batch stores nothing");
    r
}

#[tokio::test]
async fn figures_no_card_can_hold_are_refused_naming_each_field() {
    let app = TestApp::spawn().await;
    // One 60 s time-sliced window claiming a petabyte of memory held (it billed 25,000 USD once).
    let ts = json!([{"uuid": "GPU-W::0", "gpu_uuid": "GPU-W", "kind": "timeslice", "replicas": 2, "replica": 0}]);
    let mut w = held("GPU-W::0", "a", 60.0);
    w["memory_byte_seconds"] = json!(1e18);
    let r = refused(
        &app,
        &whole_batch(ts.clone(), vec![w]),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(field_names(&r), vec!["windows[0].memory_byte_seconds"]);
    assert!(
        fields(&r)[0]
            .1
            .contains("exceeds the slice's 85520809984 bytes for the 60 s held"),
        "{r:?}"
    );
    // A peak above what the slice can use: a 1g.10gb instance cannot peak at 20 GB.
    let (s, e, mut windows) = minute_windows(3);
    windows[1]["memory_peak_bytes"] = json!(20_000_000_000_i64);
    let r = refused(
        &app,
        &batch(&s, &e, windows),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(field_names(&r), vec!["windows[1].memory_peak_bytes"]);
    // A GPU of 5 TiB, and a figure past what a decimal holds.
    let mut b = whole_batch(json!([]), vec![]);
    b["gpus"][0]["memory_bytes"] = json!(5_i64 << 40);
    let r = refused(&app, &b, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(field_names(&r), vec!["gpus[0].memory_bytes"]);
    let whole = json!([{"uuid": "GPU-W", "gpu_uuid": "GPU-W", "kind": "whole"}]);
    let mut w = held("GPU-W", "a", 60.0);
    w["memory_byte_seconds"] = json!(1e300);
    let r = refused(
        &app,
        &whole_batch(whole.clone(), vec![w]),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(field_names(&r), vec!["windows[0].memory_byte_seconds"]);
}

#[tokio::test]
async fn a_card_reserved_past_itself_is_refused_naming_the_slices() {
    let app = TestApp::spawn().await;
    let slice = |uuid: &str, extra: Value| {
        let mut s = json!({"uuid": uuid, "gpu_uuid": "GPU-W"});
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        s
    };
    for (what, slices) in [
        (
            "two whole slices",
            json!([
                slice("GPU-W::a", json!({"kind": "whole"})),
                slice("GPU-W::b", json!({"kind": "whole"}))
            ]),
        ),
        (
            "vGPU 0.8 + 0.8",
            json!([
                slice("GPU-W::a", json!({"kind": "vgpu", "fraction": 0.8})),
                slice("GPU-W::b", json!({"kind": "vgpu", "fraction": 0.8}))
            ]),
        ),
        (
            "MPS 2 x 100 %",
            json!([
                slice(
                    "GPU-W::a",
                    json!({"kind": "mps", "active_thread_percentage": 100, "pinned_memory_bytes": 1_i64 << 30})
                ),
                slice(
                    "GPU-W::b",
                    json!({"kind": "mps", "active_thread_percentage": 100, "pinned_memory_bytes": 1_i64 << 30})
                )
            ]),
        ),
        (
            "MPS pinning 3 x 30 GB of 85.5 GB",
            json!([
                slice(
                    "GPU-W::a",
                    json!({"kind": "mps", "active_thread_percentage": 30, "pinned_memory_bytes": 30_000_000_000_i64})
                ),
                slice(
                    "GPU-W::b",
                    json!({"kind": "mps", "active_thread_percentage": 30, "pinned_memory_bytes": 30_000_000_000_i64})
                ),
                slice(
                    "GPU-W::c",
                    json!({"kind": "mps", "active_thread_percentage": 30, "pinned_memory_bytes": 30_000_000_000_i64})
                )
            ]),
        ),
    ] {
        let n = slices.as_array().unwrap().len();
        let r = refused(
            &app,
            &whole_batch(slices, vec![]),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        let want: Vec<String> = (0..n).map(|i| format!("slices[{i}]")).collect();
        assert_eq!(field_names(&r), want, "{what}");
        assert!(
            fields(&r)[0]
                .1
                .contains("a card cannot be reserved past itself"),
            "{what}: {r:?}"
        );
    }
    // What fits is taken: four vGPU quarters, and MPS at 50 + 50 %.
    let quarters: Vec<Value> = (0..4)
        .map(|i| {
            slice(
                &format!("GPU-W::{i}"),
                json!({"kind": "vgpu", "fraction": 0.25}),
            )
        })
        .collect();
    let r = app
        .ingest(&app.admin, &whole_batch(json!(quarters), vec![]))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

#[tokio::test]
async fn two_holders_of_one_slice_at_once_are_refused_within_a_batch() {
    let app = TestApp::spawn().await;
    let whole = json!([{"uuid": "GPU-W", "gpu_uuid": "GPU-W", "kind": "whole"}]);
    // Two consumers holding one whole GPU for the same minute.
    let r = refused(
        &app,
        &whole_batch(
            whole.clone(),
            vec![held("GPU-W", "a", 60.0), held("GPU-W", "b", 60.0)],
        ),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(
        field_names(&r),
        vec!["windows[0].held_seconds", "windows[1].held_seconds"]
    );
    assert!(fields(&r)[0].1.contains("one holder at a time"), "{r:?}");
    // The slice changing hands inside the minute is what collectors send, and is fine.
    let ok = app
        .ingest(
            &app.admin,
            &whole_batch(
                whole.clone(),
                vec![held("GPU-W", "a", 25.0), held("GPU-W", "b", 35.0)],
            ),
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{ok:?}");
    // Two time-sliced replicas each claiming the whole card's SMs for the whole minute.
    let app = TestApp::spawn().await;
    let ts = json!([
        {"uuid": "GPU-W::0", "gpu_uuid": "GPU-W", "kind": "timeslice", "replicas": 2, "replica": 0},
        {"uuid": "GPU-W::1", "gpu_uuid": "GPU-W", "kind": "timeslice", "replicas": 2, "replica": 1}]);
    let busy = |slice: &str| {
        let mut w = held(slice, slice, 60.0);
        w["compute_active_seconds"] = json!(60.0);
        w
    };
    let r = refused(
        &app,
        &whole_batch(ts, vec![busy("GPU-W::0"), busy("GPU-W::1")]),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(field_names(&r), vec!["windows[0]", "windows[1]"]);
    assert!(
        fields(&r)[0].1.contains("use 120 s of its compute"),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_re_sent_period_cannot_add_held_time_to_what_is_stored() {
    let app = TestApp::spawn().await;
    let first = batch(
        T0,
        T2,
        vec![
            window(MIG_3G, T0, T1, "nlp", "a", 60.0),
            window(MIG_3G, T1, T2, "nlp", "a", 60.0),
        ],
    );
    assert_eq!(app.ingest(&app.admin, &first).await.status, StatusCode::OK);
    let before = stored(&app).await;
    assert_eq!(before, (2, 120, 120));

    // The same period again, its windows shifted by 30 s: more held seconds than wall-clock time.
    let shifted = batch(
        T0,
        T2,
        vec![window(
            MIG_3G,
            "2026-10-01T00:00:30Z",
            "2026-10-01T00:01:30Z",
            "nlp",
            "a",
            60.0,
        )],
    );
    let r = refused(&app, &shifted, StatusCode::CONFLICT).await;
    assert_eq!(r.body["error"]["code"], "conflicting_batch");
    let f = fields(&r);
    assert_eq!(f[0].0, "windows[0]");
    assert!(
        f[0].1.contains(&format!(
            "the window stored for {MIG_3G} [2026-10-01 00:00:00 UTC, 2026-10-01 00:01:00 UTC) held by nlp/a"
        )),
        "{f:?}"
    );
    // Another consumer over the same minute, with the first holding all of it.
    let other = batch(T0, T2, vec![window(MIG_3G, T0, T1, "vision", "b", 30.0)]);
    let r = refused(&app, &other, StatusCode::CONFLICT).await;
    assert!(fields(&r)[0].1.contains("one holder at a time"), "{r:?}");
    // The same window with other figures: a stored window never changes.
    let changed = batch(T0, T2, vec![window(MIG_3G, T0, T1, "nlp", "a", 45.0)]);
    let r = refused(&app, &changed, StatusCode::CONFLICT).await;
    assert!(
        fields(&r)[0].1.contains("a stored window never changes"),
        "{r:?}"
    );
    // A whole card reported in the re-sent period beside the stored MIG instances.
    let mut whole = batch(T0, T2, vec![]);
    whole["gpus"][0]["mig_enabled"] = json!(false);
    whole["slices"] = json!([{"uuid": "GPU-extra-whole", "gpu_uuid": H100, "kind": "whole"}]);
    whole["windows"] = json!([window("GPU-extra-whole", T0, T1, "nlp", "c", 60.0)]);
    let r = refused(&app, &whole, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert!(field_names(&r).contains(&"slices[0]".to_owned()), "{r:?}");
    // An exact re-send is still a no-op.
    let again = app.ingest(&app.admin, &first).await;
    assert_eq!(again.body, json!({"inserted": 0, "duplicates": 2}));
    assert_eq!(stored(&app).await, before);
}

#[tokio::test]
async fn a_re_sent_period_cannot_reserve_a_card_its_replicas_already_used() {
    let app = TestApp::spawn().await;
    let ts = json!([
        {"uuid": "GPU-W::0", "gpu_uuid": "GPU-W", "kind": "timeslice", "replicas": 2, "replica": 0},
        {"uuid": "GPU-W::1", "gpu_uuid": "GPU-W", "kind": "timeslice", "replicas": 2, "replica": 1}]);
    let busy = |slice: &str| {
        let mut w = held(slice, slice, 60.0);
        w["compute_active_seconds"] = json!(25.0);
        w
    };
    let stored_batch = whole_batch(ts, vec![busy("GPU-W::0"), busy("GPU-W::1")]);
    assert_eq!(
        app.ingest(&app.admin, &stored_batch).await.status,
        StatusCode::OK
    );
    // The same minute again, now as a whole card held all of it: 60 + 25 + 25 s of a 60 s card.
    let whole = json!([{"uuid": "GPU-W::whole", "gpu_uuid": "GPU-W", "kind": "whole"}]);
    let r = refused(
        &app,
        &whole_batch(whole, vec![held("GPU-W::whole", "c", 60.0)]),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    // Its compute (and, with the replicas' memory, its memory) is over.
    assert!(field_names(&r).iter().all(|f| f == "windows[0]"), "{r:?}");
    assert!(
        fields(&r)
            .iter()
            .any(|(_, m)| m.contains("use 110 s of the GPU's compute")),
        "{r:?}"
    );
}

#[tokio::test]
async fn text_outside_kubernetes_lengths_or_with_control_characters_is_refused() {
    let app = TestApp::spawn().await;
    let base = || batch(T0, T1, vec![window(MIG_3G, T0, T1, "nlp", "a", 60.0)]);
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut b = base();
    b["windows"][0]["consumer"]["pod"] = json!("evil\u{0}pod");
    cases.push((b, "windows[0].consumer.pod"));
    let mut b = base();
    b["windows"][0]["consumer"]["namespace"] = json!("x".repeat(254));
    cases.push((b, "windows[0].consumer.namespace"));
    let mut b = base();
    b["windows"][0]["consumer"]["labels"] = json!({"app": "y".repeat(64)});
    cases.push((b, "windows[0].consumer.labels.app"));
    let mut b = base();
    let k = "k".repeat(318);
    b["windows"][0]["consumer"]["labels"] = json!({k.clone(): "v"});
    cases.push((b, "windows[0].consumer.labels.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk…"));
    let mut b = base();
    let many: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("l{i}"), json!("v"))).collect();
    b["windows"][0]["consumer"]["labels"] = Value::Object(many);
    cases.push((b, "windows[0].consumer.labels"));
    // A bad consumer is named in every window that carries it, not only the first.
    let mut b = batch(
        T0,
        T2,
        vec![
            window(MIG_3G, T0, T1, "nlp", "a", 60.0),
            window(MIG_3G, T1, T2, "nlp", "a", 60.0),
        ],
    );
    for w in 0..2 {
        b["windows"][w]["consumer"]["pod"] = json!("evil\u{0}pod");
    }
    cases.push((b.clone(), "windows[0].consumer.pod"));
    cases.push((b, "windows[1].consumer.pod"));
    let mut b = base();
    b["gpus"][0]["model"] = json!("NVIDIA\nH100");
    cases.push((b, "gpus[0].model"));
    let mut b = base();
    b["slices"][0]["profile"] = json!("3g\u{7f}");
    cases.push((b, "slices[0].profile"));
    for (b, field) in cases {
        let r = refused(&app, &b, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(
            field_names(&r).iter().any(|f| f == field),
            "{field} not in {r:?}"
        );
    }
}

#[tokio::test]
async fn timestamps_finer_than_a_microsecond_leap_seconds_and_old_dates_are_refused() {
    let app = TestApp::spawn().await;
    for (start, end, field, why) in [
        (
            "2026-10-01T00:00:00.0000001Z",
            T1,
            "windows[0].start",
            "finer than a microsecond",
        ),
        (T0, "2026-10-01T00:00:60Z", "windows[0].end", "leap second"),
    ] {
        let b = batch(
            T0,
            "2026-10-01T00:02:00Z",
            vec![window(MIG_3G, start, end, "nlp", "a", 1.0)],
        );
        let r = refused(&app, &b, StatusCode::UNPROCESSABLE_ENTITY).await;
        let f = fields(&r);
        assert!(
            f.iter().any(|(n, m)| n == field && m.contains(why)),
            "{field}: {f:?}"
        );
    }
    let r = refused(
        &app,
        &batch("1999-12-31T23:59:00Z", "2000-01-01T00:00:00Z", vec![]),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(field_names(&r), vec!["period.start"]);
    // A window of one microsecond across an hour boundary is stored, split exactly (it used to
    // answer 500).
    let b = batch(
        "2026-10-01T00:59:00Z",
        "2026-10-01T01:01:00Z",
        vec![window(
            MIG_1G_A,
            "2026-10-01T00:59:59.999999Z",
            "2026-10-01T01:00:00.000001Z",
            "nlp",
            "a",
            0.000002,
        )],
    );
    let r = app.ingest(&app.admin, &b).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let held: Vec<rust_decimal::Decimal> =
        sqlx::query_scalar("select held_seconds from usage_hourly order by hour")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        held,
        vec![
            rust_decimal::Decimal::new(1, 6),
            rust_decimal::Decimal::new(1, 6)
        ]
    );
}

/// Posts `body` to ingest as it is, with the admin's token.
async fn post_text(app: &TestApp, body: String) -> Reply {
    app.request(
        Request::post("/v1/ingest")
            .header(header::AUTHORIZATION, format!("Bearer {}", app.admin))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn a_key_given_twice_in_one_object_is_refused_naming_where() {
    let app = TestApp::spawn().await;
    let (s, e, windows) = minute_windows(3);
    let json = serde_json::to_string(&batch(&s, &e, windows)).unwrap();
    let twice = json.replacen(
        "\"held_seconds\":60.0",
        "\"held_seconds\":60.0,\"held_seconds\":6000.0",
        1,
    );
    assert_ne!(twice, json);
    let labels = json.replacen(
        "\"container\":\"main\"",
        "\"container\":\"main\",\"labels\":{\"team\":\"nlp\",\"team\":\"vision\"}",
        1,
    );
    // The same key again, written with an escape: the comparison is of the keys' text.
    let escaped = json.replacen(
        "\"container\":\"main\"",
        "\"container\":\"main\",\"c\\u006fntainer\":\"side\"",
        1,
    );
    assert_ne!(escaped, json);
    for (body, path) in [
        (twice, "windows[0]"),
        (labels, "windows[0].consumer.labels"),
        (escaped, "windows[0].consumer"),
    ] {
        let r = post_text(&app, body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(path)
                && (message.contains("appears twice in one object") || path.starts_with("a batch")),
            "{message}"
        );
    }
    assert_eq!(stored(&app).await, (0, 0, 0));
}

/// A body is one batch: a second object or other text after it is refused whole (until 2026-12-04
/// the first object was stored and the rest ignored); whitespace after it is not text.
#[tokio::test]
async fn text_after_the_batch_is_refused_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    let (s, e, windows) = minute_windows(3);
    let json = serde_json::to_string(&batch(&s, &e, windows)).unwrap();
    for body in [format!("{json}{json}"), format!("{json} x")] {
        let r = post_text(&app, body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("trailing characters"), "{message}");
        assert_eq!(stored(&app).await, (0, 0, 0));
    }
    let r = post_text(&app, format!("{json}\n \n")).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(stored(&app).await.0, 3);
}

/// Every leaf of a JSON value, by its path.
fn leaves(v: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                path.push(k.clone());
                leaves(x, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(i.to_string());
                leaves(x, path, out);
                path.pop();
            }
        }
        _ => out.push(path.clone()),
    }
}

fn at<'a>(v: &'a mut Value, path: &[String]) -> &'a mut Value {
    path.iter().fold(v, |v, k| match v {
        Value::Array(a) => &mut a[k.parse::<usize>().unwrap()],
        other => &mut other[k.as_str()],
    })
}

/// What a thief with a collector token, or a collector gone wrong, sends instead of a figure, a name
/// or a timestamp.
fn hostile_value(pick: u64) -> Value {
    let values = [
        json!(1e308),
        json!(-1e308),
        json!(-1),
        json!(0),
        json!(1.5),
        json!(f64::MIN_POSITIVE),
        json!(18446744073709551615_u64),
        json!(-9223372036854775808_i64),
        json!(1e27),
        json!("NaN"),
        json!("Infinity"),
        json!("-0"),
        Value::Null,
        json!(true),
        json!([]),
        json!({}),
        json!("\u{0}"),
        json!("x".repeat(70_000)),
        json!("=cmd|' /C calc'!A0"),
        json!("🚀 GPU"),
        json!(""),
        json!("\u{202e}evil"),
        json!("2026-10-01T00:00:00.0000001Z"),
        json!("1999-01-01T00:00:00Z"),
        json!("9999-12-31T23:59:59Z"),
        json!("2026-10-01T00:00:60Z"),
        json!("2026-10-01T00:00:00+14:00"),
        json!("not a time"),
    ];
    values[(pick % values.len() as u64) as usize].clone()
}

/// Batch-level damage: overlapping and repeated windows, cards reserved twice, labels by the
/// hundred, consumers naming nobody.
fn hostile_shape(b: &mut Value, pick: u64) {
    let windows = b["windows"].as_array().cloned().unwrap_or_default();
    match pick % 7 {
        0 if !windows.is_empty() => {
            let mut w = windows[0].clone();
            w["start"] = json!("2026-10-01T00:00:30Z");
            w["end"] = json!("2026-10-01T00:01:30Z");
            b["windows"].as_array_mut().unwrap().push(w);
        }
        1 if !windows.is_empty() => {
            let mut w = windows[0].clone();
            w["consumer"]["pod"] = json!("intruder");
            b["windows"].as_array_mut().unwrap().push(w);
        }
        2 => {
            let mut s = b["slices"][0].clone();
            s["uuid"] = json!("GPU-extra");
            s["kind"] = json!("whole");
            b["slices"].as_array_mut().unwrap().push(s);
        }
        3 if !windows.is_empty() => {
            let labels: serde_json::Map<String, Value> =
                (0..200).map(|i| (format!("k{i}"), json!("v"))).collect();
            b["windows"][0]["consumer"]["labels"] = Value::Object(labels);
        }
        4 if !windows.is_empty() => b["windows"][0]["consumer"] = json!({}),
        5 => {
            let many: Vec<Value> = (0..2000)
                .map(|_| windows.first().cloned().unwrap_or(Value::Null))
                .collect();
            b["windows"] = Value::Array(many);
        }
        _ => b["gpus"] = json!([]),
    }
}

/// Text no JSON value becomes: a key twice, a lone surrogate, a number past any float, a body
/// nested past any parser's depth, a body cut short.
fn hostile_text(json: &str, pick: u64) -> String {
    match pick % 6 {
        0 => json.replacen("\"node\":", "\"node\":\"x\",\"node\":", 1),
        1 => json.replacen("\"main\"", "\"\\ud800\"", 1),
        2 => json.replacen("\"held_seconds\":60.0", "\"held_seconds\":1e400", 1),
        3 => format!("{}{json}{}", "[".repeat(300), "]".repeat(300)),
        4 => json[..json.len() / 2].to_owned(),
        _ => json.replace("\"", "'"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_batches_get_a_4xx_with_a_json_error_never_a_5xx_or_a_dropped_connection() {
    let app = TestApp::spawn().await;
    let served = app
        .serve(slicemeter::http::state::ServerConfig {
            ingest_rate: 0.0,
            ..test_config()
        })
        .await;
    let base = &served.base;
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    // A connection of its own for each case: a failure is then the server dropping that one, never
    // a kept-alive connection closed between two cases.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let seed: u64 = std::env::var("SLICEMETER_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_201);
    let cases: u64 = std::env::var("SLICEMETER_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let (s, e, windows) = minute_windows(9);
    let base_batch = batch(&s, &e, windows);
    let mut statuses = std::collections::BTreeMap::new();
    for case in 0..cases {
        let r = |k: u64| slicemeter::sim::hash(&[seed, case, k]);
        let mut b = base_batch.clone();
        // One to three damaged leaves, maybe a damaged shape, maybe damaged text.
        for k in 0..=(r(0) % 3) {
            let mut paths = Vec::new();
            leaves(&b, &mut Vec::new(), &mut paths);
            let path = &paths[(r(1 + k) % paths.len() as u64) as usize];
            *at(&mut b, path) = hostile_value(r(10 + k));
        }
        if r(20) % 3 == 0 {
            hostile_shape(&mut b, r(21));
        }
        let mut body = serde_json::to_string(&b).unwrap();
        if r(30) % 4 == 0 {
            body = hostile_text(&body, r(31));
        }
        let token = if r(40) % 2 == 0 {
            &collector
        } else {
            &app.admin
        };
        let sent = client
            .post(format!("{base}/v1/ingest"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await;
        let reply = match sent {
            Ok(reply) => reply,
            Err(e) => panic!(
                "case {case} (seed {seed}): the connection failed: {e:?}\n{}",
                &body[..body.len().min(2000)]
            ),
        };
        let status = reply.status().as_u16();
        let text = reply
            .text()
            .await
            .unwrap_or_else(|e| panic!("case {case}: the body broke off: {e}"));
        assert!(
            status < 500,
            "case {case} (seed {seed}): {status} {text}\n{}",
            &body[..body.len().min(2000)]
        );
        if status >= 400 {
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("case {case}: not a JSON error: {text}"));
            assert!(
                v["error"]["code"].is_string() && v["error"]["message"].is_string(),
                "case {case}: {text}"
            );
        }
        *statuses.entry(status).or_insert(0) += 1;
    }
    // Both what is refused and what is taken were tried.
    assert!(statuses.get(&200).copied().unwrap_or(0) > 0, "{statuses:?}");
    assert!(statuses.keys().any(|s| *s >= 400), "{statuses:?}");
    eprintln!("statuses over {cases} hostile batches: {statuses:?}");
    served.stop().await;
}

/// A body far over the limit, sent over a real socket: the server reads and drops the rest before
/// answering, so the client gets its 413 (with the limit) instead of a broken pipe half way through
/// its write, whether the body's length is declared up front or it comes chunked.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_far_over_the_limit_gets_its_413_not_a_broken_pipe() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn().await;
    let served = app
        .serve(slicemeter::http::state::ServerConfig {
            body_limit: 64 << 10,
            ..test_config()
        })
        .await;
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    let huge = vec![b' '; 8 << 20];
    let reply = reqwest::Client::new()
        .post(format!("{}/v1/ingest", served.base))
        .bearer_auth(&collector)
        .header("content-type", "application/json")
        .body(huge.clone())
        .send()
        .await
        .unwrap_or_else(|e| panic!("the connection failed: {e:?}"));
    assert_eq!(reply.status(), 413);
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["error"]["code"], "payload_too_large", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit of 64 KiB (65536 bytes)"),
        "{body}"
    );

    let mut stream = tokio::net::TcpStream::connect(&served.addr).await.unwrap();
    stream
        .write_all(
            format!(
                "POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {collector}\r\n\
                 Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    for chunk in huge.chunks(1 << 20) {
        stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await
            .unwrap_or_else(|e| panic!("the server stopped reading: {e}"));
        stream.write_all(chunk).await.unwrap();
        stream.write_all(b"\r\n").await.unwrap();
    }
    stream.write_all(b"0\r\n\r\n").await.unwrap();
    let mut head = vec![0u8; 4096];
    let n = stream.read(&mut head).await.unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("payload_too_large"), "{head}");
    assert_eq!(app.count("select count(*) from occupancy").await, 0);
    served.stop().await;
}
