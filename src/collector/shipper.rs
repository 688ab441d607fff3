//! Ships batches to the server: gzip'd JSON over HTTP, retried with exponential backoff and jitter
//! while the server is unreachable, busy or failing. From the spool, a batch the server finds bad
//! (400, 409, 413, 422) is set aside, since sending it again cannot make it valid; one refused for
//! who sent it (401, 403: a wrong or expired token, a GPU registered to another node) or where (404)
//! is kept and retried, since that is a configuration mistake someone will fix, and billing data
//! must not be lost to it.

use std::io::Write;
use std::time::Duration;

use rand::Rng;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use std::sync::Arc;

use tokio::sync::watch;

use super::spool::{Spool, SpoolError};
use crate::domain::batch::{Batch, IngestOutcome};

#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    /// Worth retrying: the server was unreachable, overloaded or failed.
    #[error("the server is not taking batches now: {reason}")]
    Transient {
        reason: String,
        /// The server's status, where it answered (429, 503, ...).
        status: Option<StatusCode>,
        retry_after: Option<Duration>,
    },
    /// The server refused the batch; it will refuse it again.
    #[error("the server refused the batch ({status}): {body}")]
    Rejected { status: StatusCode, body: String },
}

/// A batch as it goes on the wire (gzip'd JSON), encoded once however often it is sent.
#[derive(Debug, Clone)]
pub struct Encoded(bytes::Bytes);

impl Encoded {
    pub fn of(batch: &Batch) -> Encoded {
        let json = serde_json::to_vec(batch).expect("a batch serialises");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&json).expect("writing to memory");
        Encoded(gz.finish().expect("writing to memory").into())
    }
}

#[derive(Clone)]
pub struct Shipper {
    client: reqwest::Client,
    url: String,
    authorization: String,
    max_backoff: Duration,
}

impl Shipper {
    /// A shipper to `server` (e.g. `http://127.0.0.1:8080`) with a bearer token.
    pub fn new(server: &str, token: &str) -> Result<Shipper, reqwest::Error> {
        Ok(Shipper {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .connect_timeout(Duration::from_secs(10))
                .build()?,
            url: format!("{}/v1/ingest", server.trim_end_matches('/')),
            authorization: format!("Bearer {token}"),
            max_backoff: Duration::from_secs(60),
        })
    }

    /// One attempt.
    pub async fn send(&self, batch: &Encoded) -> Result<IngestOutcome, ShipError> {
        let response = self
            .client
            .post(&self.url)
            .header(AUTHORIZATION, &self.authorization)
            .header(CONTENT_TYPE, "application/json")
            .header(CONTENT_ENCODING, "gzip")
            .body(batch.0.clone())
            .send()
            .await
            .map_err(|e| ShipError::Transient {
                reason: e.to_string(),
                status: None,
                retry_after: None,
            })?;
        let status = response.status();
        if status.is_success() {
            return response
                .json::<IngestOutcome>()
                .await
                .map_err(|e| ShipError::Transient {
                    reason: format!("unreadable answer: {e}"),
                    status: Some(status),
                    retry_after: None,
                });
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .map(Duration::from_secs);
        let body = response.text().await.unwrap_or_default();
        if status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
        {
            Err(ShipError::Transient {
                reason: format!("{status}: {body}"),
                status: Some(status),
                retry_after,
            })
        } else {
            Err(ShipError::Rejected { status, body })
        }
    }

    /// Sends until the server takes the batch or refuses it.
    pub async fn send_with_retry(&self, batch: &Batch) -> Result<IngestOutcome, ShipError> {
        let encoded = Encoded::of(batch);
        let mut backoff = Duration::from_millis(500);
        loop {
            match self.send(&encoded).await {
                Err(ShipError::Transient {
                    reason,
                    retry_after,
                    ..
                }) => {
                    let jitter = rand::rng().random_range(0.5..1.5);
                    let wait = retry_after.unwrap_or(backoff.mul_f64(jitter));
                    tracing::warn!(%reason, wait_ms = wait.as_millis() as u64, "Shipping a batch failed; retrying.");
                    metrics::counter!("slicemeter_collector_retries_total").increment(1);
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(self.max_backoff);
                }
                other => return other,
            }
        }
    }

    /// Whether a refusal means the batch itself is bad (set it aside) rather than who or where sent it.
    pub fn batch_is_bad(status: StatusCode) -> bool {
        matches!(status.as_u16(), 400 | 409 | 413 | 422)
    }

    /// Ships the spool, oldest first, removing each batch only after the server's 2xx. Returns when
    /// `stop` fires (what is left stays spooled for the next start), or when `finished` says no more
    /// batches will come and the spool is empty.
    pub async fn run_spool(
        self,
        spool: Arc<Spool>,
        mut stop: watch::Receiver<bool>,
        mut finished: watch::Receiver<bool>,
    ) -> Result<(), SpoolError> {
        let mut refused_backoff = Duration::from_secs(1);
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let oldest = match spool.oldest() {
                Err(SpoolError::Corrupt(path, reason)) => {
                    // Not written by a crash (files are renamed into place whole): the disk. Set it
                    // aside for a person and go on with the rest.
                    let aside = spool.reject(&path)?;
                    tracing::error!(%reason, kept = %aside.display(), "A spooled batch does not read; it is set aside.");
                    metrics::counter!("slicemeter_collector_batches_set_aside_total", "reason" => "unreadable").increment(1);
                    continue;
                }
                other => other?,
            };
            let Some((path, batch)) = oldest else {
                if *finished.borrow() {
                    return Ok(());
                }
                tokio::select! {
                    _ = spool.arrived.notified() => {}
                    _ = stop.changed() => {}
                    _ = finished.changed() => {}
                }
                continue;
            };
            let sent = tokio::select! {
                r = self.send_with_retry(&batch) => r,
                _ = stop.changed() => return Ok(()),
            };
            match sent {
                Err(ShipError::Rejected { status, body }) if !Self::batch_is_bad(status) => {
                    tracing::error!(
                        %status, answer = %body, retry_in_s = refused_backoff.as_secs(),
                        "The server refused this collector ({status}); the batches stay spooled and are retried. Check the token, the server URL and the node's GPUs' registration."
                    );
                    metrics::counter!("slicemeter_collector_refusals_retried_total", "status" => status.as_u16().to_string()).increment(1);
                    tokio::select! {
                        _ = tokio::time::sleep(refused_backoff) => {}
                        _ = stop.changed() => return Ok(()),
                    }
                    refused_backoff = (refused_backoff * 2).min(self.max_backoff);
                }
                Ok(outcome) => {
                    refused_backoff = Duration::from_secs(1);
                    spool.remove(&path)?;
                    tracing::debug!(
                        start = %batch.period.start,
                        inserted = outcome.inserted,
                        duplicates = outcome.duplicates,
                        "A batch was stored."
                    );
                    metrics::counter!("slicemeter_collector_windows_shipped_total")
                        .increment(outcome.inserted + outcome.duplicates);
                    metrics::gauge!("slicemeter_collector_last_ship_timestamp_seconds")
                        .set(chrono::Utc::now().timestamp_millis() as f64 / 1000.0);
                }
                Err(e) => {
                    let aside = spool.reject(&path)?;
                    tracing::error!(error = %e, kept = %aside.display(), "The server refused a batch; it is set aside.");
                    metrics::counter!("slicemeter_collector_batches_set_aside_total", "reason" => "refused").increment(1);
                }
            }
        }
    }
}

/// The collector's counters at zero, so that a scrape shows each before its first event
/// (`slicemeter_collector_last_ship_timestamp_seconds` appears with the first batch stored).
pub fn register_metrics() {
    for counter in [
        "slicemeter_collector_spool_dropped_total",
        "slicemeter_collector_windows_shipped_total",
        "slicemeter_collector_retries_total",
        "slicemeter_collector_readings_fitted_total",
        "slicemeter_collector_gpus_lost_total",
        "slicemeter_collector_unobserved_gaps_total",
    ] {
        metrics::counter!(counter).increment(0);
    }
    for reason in ["refused", "unreadable"] {
        metrics::counter!("slicemeter_collector_batches_set_aside_total", "reason" => reason)
            .increment(0);
    }
}
