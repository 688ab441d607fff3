//! What every handler shares: the server's configuration, the pool, the partitions known, ingest
//! (with its group committer), the report cache, the metrics handle and the ingest rate limiter.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;

use super::limits;
use crate::billing::service::BillingConfig;
use crate::db::Partitions;
use crate::exports::service::ExportConfig;
use crate::ingest::group::GroupCommit;
use crate::ingest::service::Ingestor;
use crate::ingest::validate::Limits;
use crate::reports::allocation::AllocationCache;
use crate::reports::service::ReportCache;
use crate::units::kept::{self, KeptUnitCosts};

/// What the server is configured with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The largest request body accepted, before and after gzip.
    pub body_limit: usize,
    pub ingest: Limits,
    /// How concurrent ingest requests are gathered into one transaction.
    pub group_commit: GroupCommit,
    pub request_timeout: Duration,
    pub exports: Arc<ExportConfig>,
    /// Ingest requests per second per token (0: unlimited), and the burst allowed.
    pub ingest_rate: f64,
    pub ingest_burst: f64,
    pub billing: BillingConfig,
    /// A connection that has not sent a whole header block in this long is closed.
    pub header_read_timeout: Duration,
    /// A connection on which no byte has moved for this long is closed (longer than the request
    /// timeout, so that a slow request is not cut).
    pub idle_timeout: Duration,
    /// The fleet page's GPU map draws GPUs one by one up to this many; past it, a bar per GPU
    /// model (and within a model, per node), each drilling down.
    pub gpu_map_per_gpu: usize,
    /// How old a month's report may be when it is served while another request reads it anew
    /// (the database changed); older, the request waits for the new read.
    pub report_max_stale: Duration,
    /// How old a kept read that carries no money (right-sizing's evidence, the fleet's allocation
    /// by day) may be when it is served at once while it is read anew behind the request (the
    /// database changed); older, the request reads or waits. Zero: never.
    pub kept_max_age: Duration,
    /// How long the team page waits for right-sizing's evidence when none is kept (the first
    /// page after the server started, tens of seconds at 10,000 GPUs); past it, the page comes
    /// without the percentiles and says they are being read, which goes on behind it.
    pub evidence_wait: Duration,
    /// Whether `/metrics`, which needs no token, also shows the month's billing figures so far
    /// (`reports::gauges`): each team's cost and GPU-equivalent hours, the fleet's ratios.
    pub metrics_billing: bool,
    /// The alert worker's settings (`alerts`).
    pub alerts: crate::alerts::AlertConfig,
    /// The Prometheus unit definitions' counters are read from; none: no unit cost.
    pub units_prometheus: Option<crate::units::service::UnitSource>,
    /// How old the kept unit costs of the month (`units::kept`: the gauge, the team page) may be
    /// before they are read anew, behind the request that finds them old.
    pub units_max_age: Duration,
}

impl ServerConfig {
    /// How long one statement of a request may run: nine tenths of the request timeout, so that
    /// PostgreSQL has stopped it by the time the request is answered 503.
    pub fn statement_timeout(&self) -> Duration {
        self.request_timeout.mul_f64(0.9)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            body_limit: 16 << 20,
            ingest: Limits::default(),
            group_commit: GroupCommit::default(),
            request_timeout: Duration::from_secs(60),
            exports: Arc::new(ExportConfig::default()),
            ingest_rate: 20.0,
            ingest_burst: 40.0,
            billing: BillingConfig::default(),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            gpu_map_per_gpu: 256,
            report_max_stale: Duration::from_secs(10),
            kept_max_age: Duration::from_secs(300),
            evidence_wait: Duration::from_secs(3),
            metrics_billing: false,
            alerts: crate::alerts::AlertConfig::default(),
            units_prometheus: None,
            units_max_age: Duration::from_secs(300),
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub partitions: Arc<Partitions>,
    pub ingestor: Ingestor,
    pub reports: Arc<ReportCache>,
    /// Right-sizing's evidence and the fleet's allocation by day: kept as the reports are, and
    /// served at once while young after the database changed (`kept_max_age`).
    pub evidence: Arc<crate::plan::EvidenceCache>,
    pub allocation: Arc<AllocationCache>,
    pub config: Arc<ServerConfig>,
    pub metrics: PrometheusHandle,
    /// The fleet's gauges as last rendered for `/metrics`, and when: read at most every
    /// [`GAUGES_MAX_AGE`], however often Prometheus scrapes.
    pub gauges: Arc<tokio::sync::Mutex<Option<(std::time::Instant, String)>>>,
    pub ingest_limiter: Arc<limits::RateLimiter>,
    /// Each unit's cost of the month so far (`units::kept`), for `/metrics` and the team page.
    pub unit_costs: Arc<KeptUnitCosts>,
}

/// How old the fleet's gauges may be when `/metrics` serves them.
pub const GAUGES_MAX_AGE: Duration = Duration::from_secs(15);

impl AppState {
    /// What `background` needs of this server's state: it shares the pool, the partitions known
    /// and the reports' cache.
    pub fn background(&self) -> crate::background::Inputs {
        crate::background::Inputs {
            pool: self.pool.clone(),
            partitions: self.partitions.clone(),
            reports: self.reports.clone(),
            limits: self.config.ingest,
            alerts: self.config.alerts.clone(),
            units: self.config.units_prometheus.clone(),
        }
    }

    /// The state of a server; starts ingest's group committer on the current Tokio runtime.
    pub fn new(pool: PgPool, config: ServerConfig) -> Self {
        let partitions = Arc::new(Partitions::default());
        let unit_costs = Arc::new(KeptUnitCosts::new(config.units_max_age));
        // The recorder first: a counter touched before it is installed is lost.
        let metrics = crate::process::metrics_handle();
        if config.units_prometheus.is_some() {
            // There from the start, at 0, as the other counters are.
            metrics::counter!(kept::ERRORS_METRIC).increment(0);
        }
        AppState {
            ingestor: Ingestor::new(
                pool.clone(),
                partitions.clone(),
                config.group_commit.clone(),
            ),
            reports: Arc::new(ReportCache::new(config.report_max_stale)),
            evidence: Arc::new(crate::plan::EvidenceCache::new(
                config.report_max_stale,
                config.kept_max_age,
            )),
            allocation: Arc::new(AllocationCache::new(
                config.report_max_stale,
                config.kept_max_age,
            )),
            pool,
            partitions,
            ingest_limiter: Arc::new(limits::RateLimiter::new(
                config.ingest_rate,
                config.ingest_burst,
            )),
            config: Arc::new(config),
            metrics,
            gauges: Arc::default(),
            unit_costs,
        }
    }
}
