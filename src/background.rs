//! The work a server does beside answering requests, started by `serve` (and `demo`) with the HTTP
//! server and stopped after it: the partitions of this month and the next two kept ahead and the
//! raw windows past retention dropped (every hour), the alerts worker (`alerts::worker`), and
//! right-sizing's evidence of closed days summarised (`plan::days`, a few days a round), with the
//! month rollups built from the days summarised (`reports::month_rollup`), and, with a units'
//! Prometheus, each unit's settled hours counted and kept (`units::counts`, every minute).
//! Nothing here answers a request; the HTTP layer neither starts nor knows it.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::alerts::AlertConfig;
use crate::db::Partitions;
use crate::domain::time::{month_of, next_month};
use crate::ingest::validate::Limits;
use crate::reports::service::ReportCache;
use crate::units::service::UnitSource;

/// What the background work needs: the pool and the caches the HTTP server shares with it.
pub struct Inputs {
    pub pool: PgPool,
    /// The partitions known to exist (shared with ingest, which creates them on demand).
    pub partitions: Arc<Partitions>,
    /// The reports' cache the alerts worker reads through (shared with the HTTP server).
    pub reports: Arc<ReportCache>,
    /// Ingest's limits: how long raw windows are kept.
    pub limits: Limits,
    pub alerts: AlertConfig,
    /// The units' Prometheus, if any: its counters are counted and kept.
    pub units: Option<UnitSource>,
}

/// The background work, running.
pub struct Background {
    maintenance: JoinHandle<()>,
    evidence_days: JoinHandle<()>,
    unit_counts: Option<JoinHandle<()>>,
    stop_alerts: watch::Sender<bool>,
    alerts: Option<JoinHandle<()>>,
}

/// Starts the background work.
pub fn start(inputs: Inputs) -> Background {
    let Inputs {
        pool,
        partitions,
        reports,
        limits,
        alerts,
        units,
    } = inputs;
    let (stop_alerts, alerts_stopped) = watch::channel(false);
    let alerts = crate::alerts::worker::spawn(pool.clone(), reports, alerts, alerts_stopped);
    Background {
        evidence_days: summarise_evidence_days(pool.clone()),
        unit_counts: units.map(|source| keep_unit_counts(pool.clone(), source)),
        maintenance: keep_partitions(pool, partitions, limits),
        stop_alerts,
        alerts,
    }
}

impl Background {
    /// Stops the work: partition upkeep at once; the alerts worker between rounds, waiting at
    /// most `timeout` (a delivery it is sending is finished and marked, not cut off half sent,
    /// which would send it again).
    pub async fn stop(self, timeout: Duration) {
        self.maintenance.abort();
        // A day being summarised is rolled back, and summarised again by the next server.
        self.evidence_days.abort();
        // A step being kept is rolled back, and counted again by the next round.
        if let Some(counts) = &self.unit_counts {
            counts.abort();
        }
        let _ = self.stop_alerts.send(true);
        if let Some(mut worker) = self.alerts
            && tokio::time::timeout(timeout, &mut worker).await.is_err()
        {
            tracing::warn!("The alert worker was still busy after the request timeout; stopped.");
            worker.abort();
        }
    }
}

/// Creates this month's and the next two months' partitions, now and every hour, so that ingest
/// rarely has to; and drops the months of raw windows older than the server keeps.
fn keep_partitions(pool: PgPool, partitions: Arc<Partitions>, limits: Limits) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(3600));
        loop {
            tick.tick().await;
            let this = month_of(Utc::now());
            let months = [this, next_month(this), next_month(next_month(this))];
            if let Err(e) = partitions.ensure(&pool, &months).await {
                tracing::warn!(error = %e, "Creating partitions ahead failed; ingest will create them when needed.");
            }
            if let Some(kept) = limits.raw_kept_from(Utc::now()) {
                match crate::db::drop_raw_partitions_before(&pool, kept).await {
                    Ok(dropped) => {
                        for partition in dropped {
                            tracing::info!(%partition, kept_from = %kept, "Dropped a month of raw windows past retention; its rollups stay.");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "Dropping raw partitions past retention failed; retrying in an hour.")
                    }
                }
            }
        }
    })
}

/// Summarises right-sizing's evidence of the closed days that need it (`plan::days`), a few a
/// round, the newest first, builds the windows of days and the month rollups the pages read from
/// them, and shows how far behind it is: the closed days read from the hourly rollups for want of
/// a summary, and how long ago the oldest of them ended.
fn summarise_evidence_days(pool: PgPool) -> JoinHandle<()> {
    use crate::plan::days;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(days::EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let settled = Utc::now() - chrono::Duration::from_std(days::SETTLE).unwrap_or_default();
            match days::summarise_due(&pool, settled, days::DAYS_PER_ROUND).await {
                Ok(round) => {
                    for (day, took) in &round.summarised {
                        tracing::debug!(day = %day.date_naive(), seconds = took.as_secs_f64(), "Summarised a day of right-sizing's evidence.");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Summarising right-sizing's evidence of closed days failed; they are read from the hourly rollups meanwhile.")
                }
            }
            match days::build_due_windows(&pool, Utc::now()).await {
                Ok(built) => {
                    for ((first, last), w) in &built {
                        if let days::Window::Built(rows) = w {
                            tracing::debug!(first = %first.date_naive(), last = %last.date_naive(), rows, "Built a window of right-sizing's evidence.");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Building the windows of right-sizing's evidence failed; their days are read meanwhile.")
                }
            }
            match crate::reports::month_rollup::build_due(
                &pool,
                Utc::now(),
                crate::reports::month_rollup::MONTHS_PER_ROUND,
            )
            .await
            {
                Ok(built) => {
                    for (month, b) in &built {
                        if let crate::reports::month_rollup::Built::Built(rows) = b {
                            tracing::debug!(%month, rows, "Built a month rollup.");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Building the month rollups failed; their days are read meanwhile.")
                }
            }
            let now = Utc::now();
            match crate::reports::month_rollup::months_due(&pool, now).await {
                Ok(due) => metrics::gauge!("slicemeter_month_rollups_due").set(due.len() as f64),
                Err(e) => {
                    tracing::warn!(error = %e, "Reading which month rollups are due failed.")
                }
            }
            match days::lag(&pool, now).await {
                Ok(lag) => {
                    metrics::gauge!("slicemeter_evidence_days_unsummarised").set(lag.days as f64);
                    metrics::gauge!("slicemeter_evidence_oldest_unsummarised_seconds")
                        .set(lag.oldest_age_seconds(now));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Reading how far right-sizing's day summaries lag failed.")
                }
            }
        }
    })
}

/// Counts and keeps each unit's settled hours (`units::counts`), every minute; a unit that fails
/// (its Prometheus down) is logged by the step and tried again the next minute.
fn keep_unit_counts(pool: PgPool, source: UnitSource) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Each unit's failure is logged where it happens.
            let _ = crate::units::counts::keep(&pool, &source, Utc::now()).await;
        }
    })
}
