//! The alert worker `serve` runs: evaluates budgets every `interval`, delivers due alerts every
//! `poll`, and stops between rounds when the server shuts down.

use std::time::{Duration, Instant};

use chrono::Utc;
use sqlx::PgPool;
use tokio::sync::watch;

use super::{AlertConfig, deliver, evaluate};
use crate::reports::service::ReportCache;

/// Runs the worker until `stop` turns true; `None` when alerts are off (`interval` zero).
pub fn spawn(
    pool: PgPool,
    cache: std::sync::Arc<ReportCache>,
    config: AlertConfig,
    mut stop: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    if config.interval.is_zero() {
        return None;
    }
    Some(tokio::spawn(async move {
        let client = match reqwest::Client::builder()
            .timeout(config.send_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "The alert worker cannot make an HTTP client; no alerts.");
                return;
            }
        };
        let mut next_evaluation = Instant::now();
        loop {
            if Instant::now() >= next_evaluation {
                next_evaluation = Instant::now() + config.interval;
                if let Err(e) = evaluate::evaluate(&pool, &cache, &config, Utc::now()).await {
                    tracing::warn!(error = %e, "Evaluating budgets failed; trying again next round.");
                }
            }
            if let Err(e) = deliver::deliver_due(&pool, &config, &client).await {
                tracing::warn!(error = %e, "Delivering alerts failed; trying again next round.");
            }
            let wait = config
                .poll
                .min(next_evaluation.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(10));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }))
}
