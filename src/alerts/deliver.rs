//! Delivering alerts. A due delivery is claimed with `for update skip locked`, sent, and marked in
//! the claim's transaction: no two servers send it at once, and a sent one is not sent again.
//!
//! **Webhook**: `POST` of the alert as JSON (`payload`), with `Slicemeter-Alert-Id` and
//! `Slicemeter-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under the signing
//! key>`. A receiver recomputes the HMAC over the raw body, compares in constant time, and refuses a
//! `t` more than five minutes old (docs/reports.md, Alerts). **Slack**: `POST {"text": ...}`, as incoming
//! webhooks take. **Email**: a plain-text message over SMTP. A send that fails (an error, a status
//! other than 2xx) is retried after `AlertConfig::backoff`, `max_attempts` times in all.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::json;
use sha2::Sha256;
use sqlx::PgPool;

use super::AlertConfig;
use super::store::{self, AlertRow};
use crate::budgets::Channel;

/// `t=<unix>,v1=<hex HMAC-SHA256(key, "<t>.<body>")>`.
pub fn signature(key: &[u8], t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={t},v1={hex}")
}

/// The alert as a webhook sends it.
pub fn payload(a: &AlertRow) -> serde_json::Value {
    json!({
        "id": a.alert_id, "budget_id": a.budget_id, "team": a.team_id,
        "period": a.period.format("%Y-%m").to_string(), "kind": a.kind, "key": a.key,
        "subject": a.subject, "details": a.details.0, "fired_at": a.fired_at,
    })
}

fn link(a: &AlertRow) -> Option<&str> {
    a.details.0.get("link").and_then(|l| l.as_str())
}

/// Sends due deliveries until none is left; how many were sent.
pub async fn deliver_due(
    pool: &PgPool,
    config: &AlertConfig,
    client: &reqwest::Client,
) -> Result<usize, sqlx::Error> {
    let mut sent = 0;
    loop {
        let mut tx = pool.begin().await?;
        let Some((d, a)) = store::claim_due(&mut tx).await? else {
            return Ok(sent);
        };
        let outcome = send(config, client, &d.channel.0, &a, Utc::now()).await;
        let attempts = u32::try_from(d.attempts)
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        match &outcome {
            Ok(()) => {
                sent += 1;
                store::attempted(&mut tx, d.delivery_id, Ok(())).await?;
            }
            Err(why) => {
                let retry_at = (attempts < config.max_attempts).then(|| {
                    Utc::now()
                        + chrono::Duration::from_std(config.backoff(attempts))
                            .unwrap_or(chrono::Duration::hours(1))
                });
                tracing::warn!(delivery = d.delivery_id, alert = a.alert_id, channel = d.channel.0.kind(),
                               attempts, error = %why, given_up = retry_at.is_none(),
                               "An alert's delivery failed.");
                store::attempted(&mut tx, d.delivery_id, Err((why, retry_at))).await?;
            }
        }
        tx.commit().await?;
    }
}

/// Sends alert `a` to `channel`; why not, in words that hold no secret (no URL, no password).
async fn send(
    config: &AlertConfig,
    client: &reqwest::Client,
    channel: &Channel,
    a: &AlertRow,
    now: DateTime<Utc>,
) -> Result<(), String> {
    if let Some(why) = config.cannot_send(channel) {
        return Err(why);
    }
    match channel {
        Channel::Webhook { url } => {
            let body = serde_json::to_vec(&payload(a)).map_err(|e| e.to_string())?;
            let key = config.signing_key.as_ref().map_or(&[][..], |k| &k.0);
            let request = client
                .post(url)
                .header("content-type", "application/json")
                .header("slicemeter-alert-id", a.alert_id.to_string())
                .header(
                    "slicemeter-signature",
                    signature(key, now.timestamp(), &body),
                )
                .body(body);
            answered(request.send().await)
        }
        Channel::Slack { url } => {
            let text = match link(a) {
                Some(l) => format!("{} <{l}|Open in slicemeter>", a.subject),
                None => a.subject.clone(),
            };
            answered(client.post(url).json(&json!({ "text": text })).send().await)
        }
        Channel::Email { to } => {
            let Some(smtp) = &config.smtp else {
                return Err("no SMTP server".into());
            };
            let to: lettre::message::Mailbox = to.parse().map_err(|e| format!("{e}"))?;
            let mut body = format!("{}\n\n", a.subject);
            for (k, v) in a.details.0.as_object().into_iter().flatten() {
                if k != "link" {
                    body.push_str(&format!(
                        "{k}: {}\n",
                        v.as_str().map_or(v.to_string(), Into::into)
                    ));
                }
            }
            if let Some(l) = link(a) {
                body.push_str(&format!("\nOpen in slicemeter: {l}\n"));
            }
            let message = lettre::Message::builder()
                .from(smtp.from.clone())
                .to(to)
                .subject(format!("[slicemeter] {}", a.subject))
                .header(lettre::message::header::ContentType::TEXT_PLAIN)
                .body(body)
                .map_err(|e| e.to_string())?;
            let url = std::str::from_utf8(&smtp.url.0).map_err(|_| "the SMTP URL is not UTF-8")?;
            let mailer = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                .map_err(|_| "the SMTP URL cannot be used".to_string())?
                .timeout(Some(config.send_timeout))
                .build();
            mailer
                .send(message)
                .await
                .map(|_| ())
                .map_err(|e| format!("the SMTP server refused or could not be reached: {e}"))
        }
    }
}

/// A receiver's answer: 2xx is delivered; anything else is why not (the URL left out: it may be
/// a secret).
fn answered(r: Result<reqwest::Response, reqwest::Error>) -> Result<(), String> {
    match r {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("the receiver answered {}", r.status())),
        Err(e) => Err(format!(
            "the receiver could not be reached: {}",
            e.without_url()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_timestamp_a_dot_and_the_body() {
        // Expected values from Python's hmac module, not from this code.
        assert_eq!(
            signature(b"key", 1_700_000_000, br#"{"a":1}"#),
            "t=1700000000,v1=a438e398bfafc57e4396bb7fc2304422f0f768e965d073ca313cb52e22e6ad03"
        );
        assert_eq!(
            signature(b"Jefe", 0, b"what do ya want for nothing?"),
            "t=0,v1=37f471929915ccd2cbbe79feb84ffcff4f2bb25e15fc41c2506687331ae179cc"
        );
    }
}
