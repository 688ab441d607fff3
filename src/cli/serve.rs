//! `slicemeter serve`: the API server.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

use super::args::{DbArgs, ExportArgs};
use crate::alerts::{AlertConfig, Secret, Smtp};
use crate::background;
use crate::billing::service::BillingConfig;
use crate::collector::import::prometheus::Auth;
use crate::db;
use crate::http::server;
use crate::http::state::{AppState, ServerConfig};
use crate::ingest::group::GroupCommit;
use crate::ingest::validate::Limits;
use crate::process;
use crate::units::service::UnitSource;

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Address to listen on.
    #[arg(long, env = "SLICEMETER_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Largest request body, compressed or not, in bytes (413 above).
    #[arg(long, env = "SLICEMETER_BODY_LIMIT", default_value_t = 16 << 20)]
    pub body_limit: usize,
    /// How far in the future a batch's period may end.
    #[arg(long, env = "SLICEMETER_MAX_FUTURE_SKEW", default_value = "5m", value_parser = humantime::parse_duration)]
    pub max_future_skew: Duration,
    /// Longest period one batch may report on (at most 7 days: the contract's bounds assume it).
    #[arg(long, env = "SLICEMETER_MAX_PERIOD", default_value = "24h", value_parser = humantime::parse_duration)]
    pub max_period: Duration,
    /// Most windows in one batch.
    #[arg(long, env = "SLICEMETER_MAX_WINDOWS", default_value_t = 100_000)]
    pub max_windows: usize,
    /// Months of raw windows kept before the current one (0: all); older months' partitions are
    /// dropped (their hourly rollups stay) and batches for them refused.
    #[arg(long, env = "SLICEMETER_KEEP_RAW_MONTHS", default_value_t = 13)]
    pub keep_raw_months: u32,
    /// How long a batch waits for others arriving with it, to be written in one transaction (0: no
    /// wait; batches that meet are still written together).
    #[arg(long, env = "SLICEMETER_INGEST_GROUP_WAIT", default_value = "2ms", value_parser = humantime::parse_duration)]
    pub ingest_group_wait: Duration,
    /// A group of batches is written once it holds this many windows.
    #[arg(
        long,
        env = "SLICEMETER_INGEST_GROUP_WINDOWS",
        default_value_t = 20_000
    )]
    pub ingest_group_windows: usize,
    /// Groups of batches written at once, each on a connection of its own.
    #[arg(long, env = "SLICEMETER_INGEST_WRITERS", default_value_t = 2)]
    pub ingest_writers: usize,
    /// How old a month's report may be when served while another request reads it anew (the
    /// database changed since it was read); older, requests wait for the new read.
    #[arg(long, env = "SLICEMETER_REPORT_MAX_STALE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub report_max_stale: Duration,
    /// How old a kept read that carries no money (right-sizing's evidence: the team page's
    /// percentiles, `/v1/recommendations`, the plan; the fleet page's allocation by day) may be
    /// when served at once while it is read anew behind the request (the database changed since
    /// it was read); older, the request reads it anew itself. 0s: always read anew.
    #[arg(long, env = "SLICEMETER_KEPT_MAX_AGE", default_value = "5m", value_parser = humantime::parse_duration)]
    pub kept_max_age: Duration,
    /// How long the team page waits for right-sizing's evidence when none is kept (the first page
    /// after a start); past it, the page comes without the percentiles, says they are being read,
    /// and the read goes on behind it. 0s: never wait.
    #[arg(long, env = "SLICEMETER_EVIDENCE_WAIT", default_value = "3s", value_parser = humantime::parse_duration)]
    pub evidence_wait: Duration,
    /// Requests running longer are answered 503; PostgreSQL stops each of their statements at nine
    /// tenths of it.
    #[arg(long, env = "SLICEMETER_REQUEST_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Connections in the database pool.
    #[arg(long, env = "SLICEMETER_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
    /// Ingest requests a second one token may make (0: no limit); more get 429 with Retry-After.
    #[arg(long, env = "SLICEMETER_INGEST_RATE", default_value_t = 20.0)]
    pub ingest_rate: f64,
    /// Ingest requests one token may make at once.
    #[arg(long, env = "SLICEMETER_INGEST_BURST", default_value_t = 40.0)]
    pub ingest_burst: f64,
    /// How long after a month ends its invoices wait for late data before they can be issued.
    #[arg(long, env = "SLICEMETER_ISSUE_GRACE", default_value = "1d", value_parser = humantime::parse_duration)]
    pub issue_grace: Duration,
    /// A connection that has not sent a whole header block in this long is closed (idle keep-alive
    /// connections too).
    #[arg(long, env = "SLICEMETER_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// A connection on which no byte has moved for this long is closed (more than --request-timeout).
    #[arg(long, env = "SLICEMETER_IDLE_TIMEOUT", default_value = "75s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// Also show the month's billing figures so far on `/metrics`, which needs no token: each team's
    /// cost and GPU-equivalent hours, the fleet's allocation and busy ratios and unallocated cost.
    /// Turn it on where only the platform's Prometheus can reach the server.
    #[arg(long, env = "SLICEMETER_METRICS_BILLING")]
    pub metrics_billing: bool,
    /// The Prometheus (or Thanos, Mimir, VictoriaMetrics query API) whose counters unit definitions
    /// read for the unit cost (`GET /v1/reports/unit-cost`); without it, no unit cost.
    #[arg(long, env = "SLICEMETER_UNITS_PROMETHEUS_URL")]
    pub units_prometheus_url: Option<String>,
    /// A bearer token for it.
    #[arg(
        long,
        env = "SLICEMETER_UNITS_PROMETHEUS_TOKEN",
        hide_env_values = true
    )]
    pub units_prometheus_token: Option<String>,
    /// Read the counters through its query API only, never through remote read (`/api/v1/read`: a
    /// selector's stored chunks, not every sample as JSON): for a proxy that lets only the query
    /// API through. Without it, a server that does not answer remote read is read through the
    /// query API anyway.
    #[arg(long, env = "SLICEMETER_UNITS_QUERY_API_ONLY")]
    pub units_query_api_only: bool,
    /// How long one query of it may take.
    #[arg(long, env = "SLICEMETER_UNITS_QUERY_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub units_query_timeout: Duration,
    #[command(flatten)]
    pub exports: ExportArgs,
    #[command(flatten)]
    pub alerts: AlertArgs,
}

/// The alert worker (docs/reports.md, Alerts).
#[derive(Args)]
pub struct AlertArgs {
    /// How often budgets are evaluated for alerts (0: no alert worker on this server).
    #[arg(long, env = "SLICEMETER_ALERT_INTERVAL", default_value = "5m", value_parser = humantime::parse_duration)]
    pub alert_interval: Duration,
    /// How often due alert deliveries are looked for.
    #[arg(long, env = "SLICEMETER_ALERT_POLL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub alert_poll: Duration,
    /// The wait before a failed delivery's first retry; each next one waits twice as long (at most
    /// an hour).
    #[arg(long, env = "SLICEMETER_ALERT_RETRY_BASE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub alert_retry_base: Duration,
    /// Attempts before a delivery is given up as failed.
    #[arg(long, env = "SLICEMETER_ALERT_MAX_ATTEMPTS", default_value_t = 8)]
    pub alert_max_attempts: u32,
    /// A file holding the key webhooks are signed with (HMAC-SHA256, at least 16 bytes; a final
    /// newline is not part of it). Without it, budgets cannot have webhook channels.
    #[arg(long, env = "SLICEMETER_ALERT_SIGNING_KEY_FILE")]
    pub alert_signing_key_file: Option<std::path::PathBuf>,
    /// The SMTP server email alerts go through: `smtp://host:25` (plain),
    /// `smtp://user:pass@host:587?tls=required` (STARTTLS), `smtps://user:pass@host:465`.
    /// Without it, budgets cannot have email channels. A secret, never shown.
    #[arg(long, env = "SLICEMETER_SMTP_URL", hide_env_values = true)]
    pub smtp_url: Option<String>,
    /// The sender of email alerts.
    #[arg(
        long,
        env = "SLICEMETER_SMTP_FROM",
        default_value = "slicemeter <slicemeter@localhost>"
    )]
    pub smtp_from: String,
    /// The dashboard's address as its users reach it, for the links in alerts (default: the
    /// listen address over http).
    #[arg(long, env = "SLICEMETER_PUBLIC_URL")]
    pub public_url: Option<String>,
}

impl AlertArgs {
    pub fn config(&self, listen: &str) -> anyhow::Result<AlertConfig> {
        let signing_key = match &self.alert_signing_key_file {
            None => None,
            Some(path) => {
                let mut key = std::fs::read(path).with_context(|| {
                    format!("reading --alert-signing-key-file {}", path.display())
                })?;
                while key.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    key.pop();
                }
                if key.len() < 16 {
                    bail!(
                        "--alert-signing-key-file holds {} bytes; a signing key has at least 16",
                        key.len()
                    );
                }
                Some(Secret(key))
            }
        };
        let smtp = match &self.smtp_url {
            None => None,
            Some(url) => {
                // Checked now, so that a typo stops the server rather than every email; the
                // message names no part of the URL (it may hold a password).
                lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::from_url(url)
                    .map_err(|_| anyhow::anyhow!("--smtp-url is not an SMTP URL lettre can use (smtp://host:port, smtps://...)"))?;
                let from = self.smtp_from.parse().with_context(|| {
                    format!("--smtp-from {:?} is not a mailbox", self.smtp_from)
                })?;
                Some(Smtp {
                    url: Secret(url.clone().into_bytes()),
                    from,
                })
            }
        };
        let public_url = self
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{listen}"));
        Ok(AlertConfig {
            interval: self.alert_interval,
            poll: self.alert_poll.max(Duration::from_millis(10)),
            retry_base: self.alert_retry_base,
            max_attempts: self.alert_max_attempts.max(1),
            signing_key,
            smtp,
            public_url,
            ..AlertConfig::default()
        })
    }
}

impl ServeArgs {
    pub fn config(&self) -> anyhow::Result<ServerConfig> {
        if self.idle_timeout <= self.request_timeout || self.header_read_timeout.is_zero() {
            bail!(
                "--idle-timeout must be longer than --request-timeout (a slow request would be cut), and --header-read-timeout above zero"
            );
        }
        let most = crate::domain::batch::bounds::MAX_PERIOD_SECONDS as u64;
        if self.max_period.as_secs() > most {
            bail!(
                "--max-period is at most {} (7 days): the bounds that keep every sum exact assume it",
                humantime::format_duration(Duration::from_secs(most))
            );
        }
        Ok(ServerConfig {
            body_limit: self.body_limit,
            ingest: Limits {
                max_future_skew: chrono::Duration::from_std(self.max_future_skew)?,
                max_period: chrono::Duration::from_std(self.max_period)?,
                max_windows: self.max_windows,
                keep_raw_months: (self.keep_raw_months > 0).then_some(self.keep_raw_months),
            },
            group_commit: GroupCommit {
                wait: self.ingest_group_wait,
                max_windows: self.ingest_group_windows.max(1),
                writers: self.ingest_writers.max(1),
                ..GroupCommit::default()
            },
            request_timeout: self.request_timeout,
            exports: std::sync::Arc::new(self.exports.config()?),
            ingest_rate: self.ingest_rate,
            ingest_burst: self.ingest_burst,
            billing: BillingConfig {
                issue_grace: chrono::Duration::from_std(self.issue_grace)?,
            },
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            report_max_stale: self.report_max_stale,
            kept_max_age: self.kept_max_age,
            evidence_wait: self.evidence_wait,
            metrics_billing: self.metrics_billing,
            alerts: self.alerts.config(&self.listen)?,
            units_prometheus: self.units_prometheus_url.as_ref().map(|url| UnitSource {
                url: url.clone(),
                auth: match &self.units_prometheus_token {
                    Some(t) => Auth::Bearer(t.clone()),
                    None => Auth::None,
                },
                timeout: self.units_query_timeout,
                max_answer_bytes: 1 << 30,
                remote_read: !self.units_query_api_only,
            }),
            ..ServerConfig::default()
        })
    }
}

/// Serves the API until Ctrl-C or SIGTERM (migrations applied first).
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    // Migrations on a connection of their own: they may run longer than any request may.
    let admin = db::connect(&args.db.database_url, 1)
        .await
        .context("connecting to the database")?;
    db::migrate(&admin).await.context("applying migrations")?;
    admin.close().await;
    let pool = db::connect_for_requests(
        &args.db.database_url,
        args.db_max_connections,
        config.statement_timeout(),
    )
    .await
    .context("connecting to the database")?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, "slicemeter is serving.");
    let request_timeout = config.request_timeout;
    let state = AppState::new(pool, config);
    let background = background::start(state.background());
    let served = server::serve(state, listener, process::shutdown_signal()).await;
    background.stop(request_timeout).await;
    served?;
    Ok(())
}
