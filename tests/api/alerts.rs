//! Alerts: a budget's thresholds fired once per period to each channel (a webhook verified with the
//! documented signature scheme, a Slack-compatible webhook, email to an SMTP server started here),
//! across a restart and with two servers at once; failed deliveries retried and shown; idle slices
//! and spend jumps fired with their cost.

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use axum::http::{HeaderMap, StatusCode};
use chrono::{Duration, Utc};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use slicemeter::alerts::{AlertConfig, Secret, Smtp};
use slicemeter::domain::access::Role;
use slicemeter::domain::time::start_of;
use slicemeter::http::state::ServerConfig;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::billing::rate_card;
use crate::forecast::nine_steady_days;
use crate::support::*;

const KEY: &[u8] = b"a signing key of the test, 32 b";

/// What a receiver got: each call's headers and raw body.
type Calls = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

/// An HTTP receiver on loopback: `/hook` and `/slack` record each call; `/slack` answers 500 to
/// its first call, to be retried.
async fn receiver() -> (String, Calls, Calls) {
    let (hook, slack): (Calls, Calls) = Default::default();
    let failed_once = Arc::new(Mutex::new(false));
    let app = {
        let (hook, slack) = (hook.clone(), slack.clone());
        axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(move |h: HeaderMap, body: axum::body::Bytes| {
                    let hook = hook.clone();
                    async move {
                        hook.lock().unwrap().push((h, body.to_vec()));
                        StatusCode::NO_CONTENT
                    }
                }),
            )
            .route(
                "/slack",
                axum::routing::post(move |h: HeaderMap, body: axum::body::Bytes| {
                    let (slack, failed_once) = (slack.clone(), failed_once.clone());
                    async move {
                        let mut failed = failed_once.lock().unwrap();
                        if !*failed {
                            *failed = true;
                            return StatusCode::INTERNAL_SERVER_ERROR;
                        }
                        slack.lock().unwrap().push((h, body.to_vec()));
                        StatusCode::OK
                    }
                }),
            )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, hook, slack)
}

/// An SMTP server on loopback that accepts every message: each message's DATA, as sent.
async fn smtp_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let got: Arc<Mutex<Vec<String>>> = Default::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("smtp://{}", listener.local_addr().unwrap());
    let messages = got.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let messages = messages.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                write.write_all(b"220 test SMTP\r\n").await.unwrap();
                let mut data: Option<String> = None;
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(d) = data.as_mut() {
                        if line == "." {
                            messages.lock().unwrap().push(data.take().unwrap());
                            write.write_all(b"250 queued\r\n").await.unwrap();
                        } else {
                            d.push_str(&line);
                            d.push('\n');
                        }
                        continue;
                    }
                    let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
                    let reply: &[u8] = match verb.as_str() {
                        "EHLO" | "HELO" => b"250 test\r\n",
                        "DATA" => {
                            data = Some(String::new());
                            b"354 go on\r\n"
                        }
                        "QUIT" => {
                            write.write_all(b"221 bye\r\n").await.unwrap();
                            break;
                        }
                        _ => b"250 ok\r\n",
                    };
                    write.write_all(reply).await.unwrap();
                }
            });
        }
    });
    (url, got)
}

fn alert_config(smtp_url: &str) -> AlertConfig {
    AlertConfig {
        interval: StdDuration::from_millis(150),
        poll: StdDuration::from_millis(50),
        retry_base: StdDuration::from_millis(100),
        max_attempts: 3,
        signing_key: Some(Secret(KEY.to_vec())),
        smtp: Some(Smtp {
            url: Secret(smtp_url.as_bytes().to_vec()),
            from: "slicemeter <alerts@example.com>".parse().unwrap(),
        }),
        public_url: "https://slicemeter.example.com".into(),
        ..AlertConfig::default()
    }
}

/// Checks a webhook call's signature as a receiver would (docs/reports.md, Alerts): HMAC-SHA256 of
/// `<t>.<raw body>` under the key, hex, in `Slicemeter-Signature: t=<t>,v1=<hex>`.
fn verify(headers: &HeaderMap, body: &[u8]) {
    let sig = headers["slicemeter-signature"].to_str().unwrap();
    let (t, v1) = sig
        .strip_prefix("t=")
        .and_then(|s| s.split_once(",v1="))
        .unwrap_or_else(|| panic!("not t=...,v1=...: {sig}"));
    let t: i64 = t.parse().unwrap();
    assert!(
        (Utc::now().timestamp() - t).abs() < 300,
        "signed {t}, now {}",
        Utc::now().timestamp()
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(KEY).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    let expected = hex(&mac.finalize().into_bytes());
    assert_eq!(v1, expected, "the signature does not verify");
    let mut wrong = Hmac::<Sha256>::new_from_slice(b"another key entirely, 32 bytes!").unwrap();
    wrong.update(format!("{t}.").as_bytes());
    wrong.update(body);
    assert_ne!(v1, hex(&wrong.finalize().into_bytes()));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn wait_for(app: &TestApp, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + StdDuration::from_secs(60);
    loop {
        let r = app.get(Some(&app.admin), "/v1/alerts").await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        if done(&r.body) {
            return r.body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never {what}: {}",
            r.body
        );
        tokio::time::sleep(StdDuration::from_millis(100)).await;
    }
}

#[tokio::test]
// long: one scenario across two servers and a restart: each step needs the state the one before
// left
async fn each_threshold_reaches_each_channel_once_across_a_restart_and_with_two_servers() {
    let (base, hook, slack) = receiver().await;
    let (smtp_url, mail) = smtp_server().await;
    let alerts = alert_config(&smtp_url);
    let config = ServerConfig {
        ingest_rate: 0.0,
        alerts: alerts.clone(),
        ..test_config()
    };
    let app = TestApp::with_config(config.clone()).await;
    nine_steady_days(&app).await;
    // 13/7 an hour forecasts 1,248-1,382 a month whatever the day: past 50 % and 100 % of 200.00,
    // never 1000 % of it spent (2,000.00).
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/gone", l.local_addr().unwrap())
    };
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/budgets",
            &json!({"team": "nlp", "amount": "200.00", "currency": "USD",
                    "thresholds": [{"kind": "forecast", "percent": 50},
                                   {"kind": "forecast", "percent": 100},
                                   {"kind": "actual", "percent": 1000}],
                    "channels": [{"type": "webhook", "url": format!("{base}/hook")},
                                 {"type": "slack", "url": format!("{base}/slack")},
                                 {"type": "email", "to": "nlp-lead@example.com"},
                                 {"type": "webhook", "url": dead}],
                    "idle_days": 3, "spend_change": "3"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let budget_id = r.body["id"].as_i64().unwrap();
    // Answers show a URL to its origin only.
    assert_eq!(r.body["channels"][1]["target"], format!("{base}/…"));

    let first = app.serve(config.clone()).await;
    let second = app.serve(config.clone()).await;
    let settled = |body: &Value| {
        let alerts = body.as_array().unwrap();
        alerts.len() == 2
            && alerts.iter().all(|a| {
                a["deliveries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|d| d["state"] != "pending")
            })
    };
    wait_for(&app, "delivered", settled).await;
    // Both servers keep evaluating; one of them restarts.
    tokio::time::sleep(StdDuration::from_millis(600)).await;
    first.stop().await;
    let again = app.serve(config.clone()).await;
    tokio::time::sleep(StdDuration::from_millis(900)).await;
    again.stop().await;
    second.stop().await;

    let body = wait_for(&app, "settled", settled).await;
    let alerts = body.as_array().unwrap();
    let mut keys: Vec<(&str, &str)> = alerts
        .iter()
        .map(|a| (a["kind"].as_str().unwrap(), a["key"].as_str().unwrap()))
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![("forecast", "100"), ("forecast", "50")],
        "{body}"
    );
    for a in alerts {
        assert_eq!(a["budget_id"], budget_id);
        assert_eq!(a["team"], "nlp");
        assert_eq!(a["period"], Utc::now().format("%Y-%m").to_string());
        let states: Vec<(&str, &str, i64)> = a["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["channel"]["type"].as_str().unwrap(),
                    d["state"].as_str().unwrap(),
                    d["attempts"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(states[0], ("webhook", "delivered", 1), "{a}");
        assert_eq!(states[1].0, "slack");
        assert_eq!(states[1].1, "delivered");
        assert_eq!(states[2], ("email", "delivered", 1), "{a}");
        // The dead receiver: given up after 3 attempts, with why (and no URL in it).
        assert_eq!(states[3], ("webhook", "failed", 3), "{a}");
        let why = a["deliveries"][3]["last_error"].as_str().unwrap();
        assert!(
            why.contains("could not be reached") && !why.contains("/gone"),
            "{why}"
        );
    }
    // Slack's first call got a 500 and was retried: 3 attempts for the two alerts.
    let slack_attempts: i64 = alerts
        .iter()
        .map(|a| a["deliveries"][1]["attempts"].as_i64().unwrap())
        .sum();
    assert_eq!(slack_attempts, 3);

    // Exactly one signed call per threshold.
    let hook = hook.lock().unwrap();
    assert_eq!(hook.len(), 2, "webhook calls");
    let mut percents = Vec::new();
    for (headers, body) in hook.iter() {
        verify(headers, body);
        let p: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(p["team"], "nlp");
        assert_eq!(p["kind"], "forecast");
        assert_eq!(
            headers["slicemeter-alert-id"].to_str().unwrap(),
            p["id"].to_string()
        );
        assert_eq!(p["details"]["budget"], "200.00");
        assert_eq!(p["details"]["currency"], "USD");
        let forecast: rust_decimal::Decimal =
            p["details"]["amount"].as_str().unwrap().parse().unwrap();
        assert!(
            forecast >= "1248".parse().unwrap() && forecast <= "1382".parse().unwrap(),
            "{p}"
        );
        percents.push(p["details"]["threshold"]["percent"].as_i64().unwrap());
    }
    percents.sort();
    assert_eq!(percents, vec![50, 100]);
    let amounts: Vec<String> = hook
        .iter()
        .map(|(_, body)| {
            let p: Value = serde_json::from_slice(body).unwrap();
            p["details"]["amount"].as_str().unwrap().to_owned()
        })
        .collect();

    let slack = slack.lock().unwrap();
    assert_eq!(slack.len(), 2, "Slack calls that were answered 200");
    for (_, body) in slack.iter() {
        let p: Value = serde_json::from_slice(body).unwrap();
        let text = p["text"].as_str().unwrap();
        assert!(text.starts_with("nlp is forecast to spend "), "{text}");
        assert!(
            text.contains("<https://slicemeter.example.com/ui/team/nlp?month="),
            "{text}"
        );
    }

    let mail = mail.lock().unwrap();
    assert_eq!(mail.len(), 2, "emails");
    for m in mail.iter() {
        assert!(m.contains("To: nlp-lead@example.com"), "{m}");
        assert!(
            m.contains("Subject: [slicemeter] nlp is forecast to spend"),
            "{m}"
        );
        assert!(m.contains("against a budget of 200.00 USD"), "{m}");
        // The forecast amount, as the webhook carried it for the same alert.
        assert!(
            amounts
                .iter()
                .any(|a| m.contains(&format!("amount: {a}\n"))),
            "{m} has none of {amounts:?}"
        );
        assert!(
            m.contains("https://slicemeter.example.com/ui/team/nlp?month="),
            "{m}"
        );
    }
}

#[tokio::test]
async fn channels_are_checked_and_a_lead_reads_only_their_teams_alerts() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    // This server has neither a signing key nor SMTP: those channels are refused now.
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/budgets",
            &json!({"team": "nlp", "amount": "200.00", "currency": "USD",
                    "thresholds": [{"kind": "actual", "percent": 80}],
                    "channels": [{"type": "webhook", "url": "https://example.com/h"},
                                 {"type": "email", "to": "a@example.com"},
                                 {"type": "slack", "url": "ftp://example.com"},
                                 {"type": "sms", "to": "+1555"}],
                    "idle_days": 0, "spend_change": "1"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(
        field_names(&r),
        vec![
            "channels[2].url",
            "channels[3].type",
            "idle_days",
            "spend_change"
        ]
    );
    let lead = app.token(Role::TeamLead, Some("vision"), None).await;
    let r = app.get(Some(&lead), "/v1/alerts?team=nlp").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    let r = app
        .get(Some(&app.admin), "/v1/alerts?limit=0&team=NLP")
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(field_names(&r), vec!["team", "limit"]);
}

#[tokio::test]
async fn an_idle_slice_and_a_spend_jump_fire_once_with_their_cost() {
    let app = TestApp::spawn().await;
    app.put_team("nlp", &["nlp"]).await;
    assert_eq!(
        rate_card(&app, "2026-01-01T00:00:00Z", "4.00").await.status,
        StatusCode::CREATED
    );
    let now = Utc::now();
    let today = start_of(now.date_naive());
    // 15 days: the 1g.10gb an hour a day (busy), ten hours yesterday; the 3g.40gb held all of the
    // last three days by a pod that never computes.
    for back in 1..=15 {
        let day = today - Duration::days(back);
        let hours = if back == 1 { 10 } else { 1 };
        let mut windows = Vec::new();
        for h in 0..hours {
            let s = day + Duration::hours(h);
            windows.push(window(
                MIG_1G_A,
                &s.to_rfc3339(),
                &(s + Duration::hours(1)).to_rfc3339(),
                "nlp",
                "trainer-0",
                3600.0,
            ));
        }
        if back <= 3 {
            for h in 0..24 {
                let s = day + Duration::hours(h);
                let mut idle = window(
                    MIG_3G,
                    &s.to_rfc3339(),
                    &(s + Duration::hours(1)).to_rfc3339(),
                    "nlp",
                    "idler-0",
                    3600.0,
                );
                idle["compute_active_seconds"] = json!(0.0);
                windows.push(idle);
            }
        }
        let r = app
            .ingest(
                &app.admin,
                &batch(
                    &day.to_rfc3339(),
                    &(day + Duration::days(1)).to_rfc3339(),
                    windows,
                ),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    let r = app
        .send_json(
            "POST",
            Some(&app.admin),
            "/v1/budgets",
            &json!({"team": "nlp", "amount": "1000000.00", "currency": "USD",
                    "thresholds": [{"kind": "actual", "percent": 100}],
                    "idle_days": 3, "spend_change": "3"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");

    let cache = slicemeter::reports::service::ReportCache::new(StdDuration::ZERO);
    let config = AlertConfig::default();
    let fired = slicemeter::alerts::evaluate::evaluate(&app.pool, &cache, &config, now)
        .await
        .unwrap();
    assert_eq!(fired, 2);
    let again = slicemeter::alerts::evaluate::evaluate(&app.pool, &cache, &config, now)
        .await
        .unwrap();
    assert_eq!(again, 0, "fired once");

    let lead = app.token(Role::TeamLead, Some("nlp"), None).await;
    let r = app.get(Some(&lead), "/v1/alerts").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let alerts = r.body.as_array().unwrap();
    assert_eq!(alerts.len(), 2, "{}", r.body);
    let of = |kind: &str| alerts.iter().find(|a| a["kind"] == kind).unwrap();
    // The 3g.40gb at 4.00 an hour is 13/7 an hour: 72 hours are 133.714..., 133.71.
    let idle = of("idle");
    assert_eq!(idle["details"]["amount"], "133.71", "{idle}");
    assert_eq!(idle["details"]["days"], 3);
    assert_eq!(idle["details"]["profile"], "3g.40gb");
    assert!(
        idle["subject"]
            .as_str()
            .unwrap()
            .contains("for 3 days with no compute: 133.71 USD"),
        "{idle}"
    );
    // Yesterday: 24 h of the 3g.40gb (13/7) and 10 h of the 1g.10gb (15/28) = 49.928...; the 14
    // days before: twelve of one 1g.10gb hour (0.5357...) and two with the idle slice too: median
    // 0.5357..., 0.54.
    let jump = of("spend_change");
    assert_eq!(jump["details"]["amount"], "49.93", "{jump}");
    assert_eq!(jump["details"]["median"], "0.54", "{jump}");
    assert_eq!(
        jump["key"],
        (today - Duration::days(1)).date_naive().to_string()
    );
    assert!(jump["deliveries"].as_array().unwrap().is_empty());
}
