//! Alerts (issue 15): a worker inside `serve` evaluates every budget every `--alert-interval`
//! (`evaluate`) and fires each alert once per period: a threshold crossed, a slice held idle for
//! the budget's `idle_days`, a day costing more than `spend_change` times the trailing median. The
//! fire-once state is the `alert` table's unique key, so a restart or a second replica never fires
//! twice. Each alert is delivered to the budget's channels (`deliver`): a signed webhook, a
//! Slack-compatible incoming webhook, or email over SMTP, retried with backoff; `GET /v1/alerts`
//! shows them with each delivery's state.

pub mod deliver;
pub mod evaluate;
pub mod kind;
pub mod store;
pub mod worker;

use std::time::Duration;

use crate::budgets::Channel;
pub use kind::{AlertKind, DeliveryState};

/// How the alert worker runs and where it sends.
#[derive(Clone)]
pub struct AlertConfig {
    /// How often budgets are evaluated (zero: no alert worker).
    pub interval: Duration,
    /// How often due deliveries are looked for.
    pub poll: Duration,
    /// The first retry's wait; each next one waits twice as long, at most an hour.
    pub retry_base: Duration,
    /// Attempts before a delivery is given up as `failed`.
    pub max_attempts: u32,
    /// How long one send may take.
    pub send_timeout: Duration,
    /// The key webhooks are signed with (`Slicemeter-Signature`); without one, no webhook channel.
    pub signing_key: Option<Secret>,
    /// Where email goes out; without it, no email channel.
    pub smtp: Option<Smtp>,
    /// The dashboard's address as its users reach it, for the links in alerts.
    pub public_url: String,
}

/// A secret: never printed, never logged.
#[derive(Clone)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// The SMTP server email alerts go through, and their sender.
#[derive(Clone)]
pub struct Smtp {
    /// `smtp://host:port` (no TLS), `smtp://host:port?tls=required` (STARTTLS) or
    /// `smtps://user:password@host:port`; it may hold a password, so it is never logged.
    pub url: Secret,
    pub from: lettre::message::Mailbox,
}

impl std::fmt::Debug for AlertConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertConfig")
            .field("interval", &self.interval)
            .field("poll", &self.poll)
            .field("retry_base", &self.retry_base)
            .field("max_attempts", &self.max_attempts)
            .field("signing_key", &self.signing_key.as_ref().map(|_| "…"))
            .field("smtp", &self.smtp.as_ref().map(|s| s.from.to_string()))
            .field("public_url", &self.public_url)
            .finish()
    }
}

impl Default for AlertConfig {
    fn default() -> Self {
        AlertConfig {
            interval: Duration::from_secs(300),
            poll: Duration::from_secs(5),
            retry_base: Duration::from_secs(30),
            max_attempts: 8,
            send_timeout: Duration::from_secs(10),
            signing_key: None,
            smtp: None,
            public_url: "http://127.0.0.1:8080".into(),
        }
    }
}

impl AlertConfig {
    /// Why this server cannot send to `channel`, if it cannot.
    pub fn cannot_send(&self, channel: &Channel) -> Option<String> {
        match channel {
            Channel::Webhook { .. } if self.signing_key.is_none() => Some(
                "this server has no --alert-signing-key-file: webhooks are sent signed or not at all"
                    .into(),
            ),
            Channel::Email { .. } if self.smtp.is_none() => {
                Some("this server has no --smtp-url to send email through".into())
            }
            _ => None,
        }
    }

    /// How long to wait after the `attempts`-th failed attempt.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let factor = 1u32 << attempts.saturating_sub(1).min(16);
        self.retry_base
            .saturating_mul(factor)
            .min(Duration::from_secs(3600))
    }
}

/// The latest `limit` alerts (`team`'s only, when given), newest first, with their deliveries.
pub async fn list(
    pool: &sqlx::PgPool,
    team: Option<&crate::domain::team::TeamId>,
    limit: i64,
) -> Result<Vec<(store::AlertRow, Vec<store::DeliveryRow>)>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    store::list(&mut conn, team, limit).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_twice_as_long_each_time_up_to_an_hour() {
        let c = AlertConfig::default();
        let waits: Vec<u64> = (1..=9).map(|n| c.backoff(n).as_secs()).collect();
        assert_eq!(waits, vec![30, 60, 120, 240, 480, 960, 1920, 3600, 3600]);
    }
}
