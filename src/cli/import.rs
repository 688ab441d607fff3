//! `slicemeter import prometheus`: back-fills past months from a Prometheus (or Thanos, Mimir,
//! VictoriaMetrics) that scraped the fleet's dcgm-exporters (`collector::import`), chunk by chunk:
//! each read whole from Prometheus, then sent as each node's batches, the chunks done kept in a
//! state file so that an interrupted import goes on where it stopped. `--dry-run` sends nothing and
//! prints what it would store, and each month's cost under the current rate card.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, NaiveDate, Utc};
use clap::{Args, Subcommand};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::collector::import;
use crate::collector::import::prometheus::{Auth, Prometheus};
use crate::collector::shipper::{ShipError, Shipper};
use crate::collector::source::dcgm::Refusals;
use crate::collector::source::dcgm::read::{ConsumerLabels, ReadOptions};
use crate::collector::source::nvml::Sharing;
use crate::process;
use dry_run::{RateCardView, Tally, print_dry_run};
use reader::{Reader, Server, Timing};

mod dry_run;
mod reader;

#[derive(Subcommand)]
pub enum ImportCommand {
    /// Back-fill from Prometheus' HTTP API what it scraped of the fleet's dcgm-exporters.
    Prometheus(Box<PrometheusArgs>),
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConsumerLabelsArg {
    /// `exported_pod` and its kin where Prometheus has them (it scraped without `honor_labels`),
    /// else `pod`, `namespace`, `container`.
    Auto,
    Plain,
    Exported,
}

#[derive(Args)]
pub struct PrometheusArgs {
    /// The query API's base, e.g. http://prometheus:9090 (Thanos, Mimir and VictoriaMetrics alike).
    #[arg(long, env = "SLICEMETER_PROMETHEUS_URL")]
    pub url: String,
    /// The first day (2026-10-01) or instant to import, on the window grid.
    #[arg(long, value_parser = instant)]
    pub from: DateTime<Utc>,
    /// The end (excluded), a day or an instant; at most now.
    #[arg(long, value_parser = instant)]
    pub to: DateTime<Utc>,
    /// The slicemeter server.
    #[arg(long, env = "SLICEMETER_SERVER")]
    pub server: String,
    /// An importer's (or an admin's) token.
    #[arg(
        long,
        env = "SLICEMETER_TOKEN",
        hide_env_values = true,
        required_unless_present = "token_file"
    )]
    pub token: Option<String>,
    /// Read that token from this file instead.
    #[arg(long, env = "SLICEMETER_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// A bearer token for the query API.
    #[arg(
        long,
        env = "SLICEMETER_PROMETHEUS_TOKEN",
        hide_env_values = true,
        conflicts_with = "prometheus_user"
    )]
    pub prometheus_token: Option<String>,
    /// A user for the query API's basic auth (its password from --prometheus-password-file or
    /// SLICEMETER_PROMETHEUS_PASSWORD).
    #[arg(long, env = "SLICEMETER_PROMETHEUS_USER")]
    pub prometheus_user: Option<String>,
    /// That user's password (a secret, never shown).
    #[arg(long, env = "SLICEMETER_PROMETHEUS_PASSWORD", hide_env_values = true)]
    pub prometheus_password: Option<String>,
    /// Read that password from this file instead.
    #[arg(
        long,
        env = "SLICEMETER_PROMETHEUS_PASSWORD_FILE",
        conflicts_with = "prometheus_password"
    )]
    pub prometheus_password_file: Option<PathBuf>,
    /// Prometheus' scrape interval of the exporters; read from the samples when not given.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub scrape_interval: Option<Duration>,
    /// The occupancy window, as the collectors' --window.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub window: Duration,
    /// How much time one query reads, and one node's batch reports on.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub chunk: Duration,
    /// How the device plugin shares GPUs not in MIG mode: none, timeslice:N or mps:N.
    #[arg(long, default_value = "none")]
    pub gpu_sharing: Sharing,
    /// A node whose device plugin shares GPUs otherwise: NODE=SHARING (e.g.
    /// gpu-node-7=timeslice:4), as often as needed.
    #[arg(long, value_parser = node_sharing)]
    pub node_sharing: Vec<(String, Sharing)>,
    /// Which labels name a series' holder.
    #[arg(
        long = "holder-labels",
        value_name = "HOLDER_LABELS",
        value_enum,
        default_value = "auto"
    )]
    pub consumer_labels: ConsumerLabelsArg,
    /// Times a query that timed out or met a server error is asked again.
    #[arg(long, default_value_t = 2)]
    pub retries: u32,
    /// How long one query may take.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub query_timeout: Duration,
    /// The largest answer read from Prometheus, in bytes.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_answer_bytes: usize,
    /// Batches sent at once.
    #[arg(long, default_value_t = 8)]
    pub in_flight: usize,
    /// Where the chunks done are kept, to go on after an interrupt.
    #[arg(long, default_value = "slicemeter-import.state.json")]
    pub state: PathBuf,
    /// Send nothing: print what would be stored, and each month's cost under the current rate card.
    #[arg(long)]
    pub dry_run: bool,
}

/// A day (`2026-10-01`, its start in UTC) or an RFC 3339 instant.
fn instant(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).expect("midnight").and_utc());
    }
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| format!("{s:?} is neither a day (2026-10-01) nor an RFC 3339 instant"))
}

fn node_sharing(s: &str) -> Result<(String, Sharing), String> {
    let (node, sharing) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NODE=SHARING"))?;
    Ok((node.to_owned(), sharing.parse()?))
}

/// What a run keeps between starts: its parameters and the chunks it finished, each `[start, end)`
/// in Unix milliseconds (the last chunk of a run may end early, at the run's end).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct State {
    url: String,
    from: DateTime<Utc>,
    window_ms: i64,
    chunk_ms: i64,
    done: Vec<(i64, i64)>,
}

impl State {
    fn load(path: &PathBuf, fresh: State) -> State {
        match std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<State>(&b).ok())
        {
            Some(s)
                if State {
                    done: Vec::new(),
                    ..s.clone()
                } == fresh =>
            {
                if !s.done.is_empty() {
                    eprintln!(
                        "Going on from {}: {} chunks were imported before.",
                        path.display(),
                        s.done.len()
                    );
                }
                s
            }
            _ => fresh,
        }
    }

    fn save(&self, path: &PathBuf) -> anyhow::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
    }
}

pub async fn run(command: ImportCommand) -> anyhow::Result<()> {
    match command {
        ImportCommand::Prometheus(args) => prometheus(*args).await,
    }
}

// long: the import's steps in order (ask, read, integrate, ship), sharing the counters its summary
// prints
async fn prometheus(args: PrometheusArgs) -> anyhow::Result<()> {
    let window_ms = args.window.as_millis() as i64;
    let chunk_ms = args.chunk.as_millis() as i64;
    if window_ms <= 0 || chunk_ms <= 0 || chunk_ms % window_ms != 0 {
        bail!("--chunk must be a whole number of --window");
    }
    if chunk_ms > 86_400_000 {
        bail!("--chunk is at most 24h, the server's longest batch period by default");
    }
    let (from, mut to) = (args.from.timestamp_millis(), args.to.timestamp_millis());
    if from % window_ms != 0 || to % window_ms != 0 {
        bail!("--from and --to must lie on the window grid (whole windows since the Unix epoch)");
    }
    let now = Utc::now().timestamp_millis();
    to = to.min(now.div_euclid(window_ms) * window_ms);
    if from >= to {
        bail!("--from must be before --to (and before now)");
    }
    let token = match (&args.token, &args.token_file) {
        (Some(t), _) => t.clone(),
        (None, Some(p)) => std::fs::read_to_string(p)
            .with_context(|| format!("reading {}", p.display()))?
            .trim()
            .to_owned(),
        (None, None) => bail!("--token or --token-file is required"),
    };
    let auth = match (&args.prometheus_token, &args.prometheus_user) {
        (Some(t), _) => Auth::Bearer(t.clone()),
        (None, Some(user)) => {
            let password = match (&args.prometheus_password, &args.prometheus_password_file) {
                (Some(p), _) => p.clone(),
                (None, Some(f)) => std::fs::read_to_string(f)
                    .with_context(|| format!("reading {}", f.display()))?
                    .trim_end_matches('\n')
                    .to_owned(),
                (None, None) => {
                    bail!("--prometheus-user needs a password (--prometheus-password-file)")
                }
            };
            Auth::Basic {
                user: user.clone(),
                password,
            }
        }
        (None, None) => Auth::None,
    };
    let prom = Prometheus::new(&args.url, auth, args.query_timeout, args.max_answer_bytes)
        .map_err(anyhow::Error::msg)?;
    let consumers = match args.consumer_labels {
        ConsumerLabelsArg::Plain => ConsumerLabels::Plain,
        ConsumerLabelsArg::Exported => ConsumerLabels::Exported,
        ConsumerLabelsArg::Auto => {
            let names = prom.label_names(&import::selector()).await?;
            if names.iter().any(|n| n == "exported_pod") {
                eprintln!(
                    "Holders are read from exported_pod, exported_namespace and exported_container (Prometheus scraped without honor_labels)."
                );
                ConsumerLabels::Exported
            } else {
                ConsumerLabels::Plain
            }
        }
    };
    let server = Server {
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?,
        base: args.server.trim_end_matches('/').to_owned(),
        shipper: Shipper::new(&args.server, &token)?,
        token,
    };
    let card: Option<RateCardView> = if args.dry_run {
        let cards: Vec<RateCardView> = server.get("/v1/rate-cards", &[]).await?;
        cards.into_iter().max_by_key(|c| c.version)
    } else {
        None
    };
    let fresh = State {
        url: args.url.clone(),
        from: args.from,
        window_ms,
        chunk_ms,
        done: Vec::new(),
    };
    let mut state = if args.dry_run {
        fresh
    } else {
        State::load(&args.state, fresh)
    };
    let chunks: Vec<(i64, i64)> = (0..)
        .map(|k| from + k * chunk_ms)
        .take_while(|&c| c < to)
        .map(|c| (c, (c + chunk_ms).min(to)))
        .collect();
    let bar = indicatif::ProgressBar::new(chunks.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} chunks {elapsed_precise} (eta {eta}) {msg}",
        )
        .expect("a valid template"),
    );
    Refusals::register_metrics();
    let mut refusals = Refusals::default();
    let (mut stored, mut duplicates, mut sent_windows, mut series_seen) =
        (0u64, 0u64, 0u64, 0usize);
    let mut refused_series: std::collections::BTreeSet<(&'static str, String)> = Default::default();
    let mut months: BTreeMap<String, Tally> = BTreeMap::new();
    let weights = card
        .as_ref()
        .map(|c| {
            use rust_decimal::prelude::ToPrimitive;
            (
                c.weights.compute.to_f64().unwrap_or(0.5),
                c.weights.memory.to_f64().unwrap_or(0.5),
            )
        })
        .unwrap_or((0.5, 0.5));
    let todo: Vec<(i64, i64)> = chunks
        .iter()
        .copied()
        .filter(|c| !state.done.contains(c))
        .collect();
    bar.inc((chunks.len() - todo.len()) as u64);
    let server = std::sync::Arc::new(server);
    let reader = Reader {
        prometheus: prom,
        server: server.clone(),
        read: ReadOptions {
            consumers,
            sharing: args.gpu_sharing,
        },
        node_sharing: args.node_sharing.iter().cloned().collect(),
        window_ms,
        interval_ms: args.scrape_interval.map(|d| d.as_millis() as i64),
        retries: args.retries,
        timing: Timing::default(),
    };
    // The next chunks are read from Prometheus while this one is sent.
    let (tx, mut rx) = tokio::sync::mpsc::channel(2);
    let reading = tokio::spawn(reader.run(todo, tx));
    let mut sending = Duration::ZERO;
    let mut shutdown = std::pin::pin!(process::shutdown_signal());
    loop {
        let prepared = tokio::select! {
            p = rx.recv() => match p {
                Some(p) => p?,
                None => break,
            },
            _ = &mut shutdown => {
                reading.abort();
                bar.abandon();
                eprintln!("Stopped; the next run goes on where this one did.");
                return Ok(());
            }
        };
        series_seen = series_seen.max(prepared.series);
        for r in &prepared.refused {
            refused_series.insert((r.reason.as_str(), r.series.clone()));
        }
        refusals.say(prepared.refused);
        let started = std::time::Instant::now();
        if args.dry_run {
            let tally = months.entry(prepared.month.clone()).or_default();
            for b in &prepared.batches {
                tally.add(b, weights);
            }
        } else {
            let mut sends = futures_util::stream::iter(prepared.batches.iter().map(|b| {
                let shipper = server.shipper.clone();
                async move { (b, shipper.send_with_retry(b).await) }
            }))
            .buffer_unordered(args.in_flight.max(1));
            while let Some((b, result)) = sends.next().await {
                match result {
                    Ok(o) => {
                        stored += o.inserted;
                        duplicates += o.duplicates;
                        sent_windows += b.windows.len() as u64;
                    }
                    Err(ShipError::Rejected { status, body }) => bail!(
                        "the server refused node {}'s batch for [{}, {}) ({status}): {body}",
                        b.node,
                        b.period.start,
                        b.period.end
                    ),
                    Err(e) => bail!("sending node {}'s batch: {e}", b.node),
                }
            }
            state.done.push(prepared.chunk);
            state.save(&args.state)?;
        }
        sending += started.elapsed();
        bar.set_message(format!(
            "{} · {} series · {} windows stored",
            prepared.month, prepared.series, stored
        ));
        bar.inc(1);
    }
    let timing = reading.await??;
    tracing::info!(
        prometheus_s = timing.querying.as_secs_f64(),
        reading_s = timing.reading.as_secs_f64(),
        sending_s = sending.as_secs_f64(),
        "Import done: time asking Prometheus, reading its samples into windows, and sending (the first two overlap the third)."
    );
    bar.finish();
    if args.dry_run {
        print_dry_run(&months, card.as_ref());
    } else {
        println!(
            "Imported: {sent_windows} windows sent, {stored} stored, {duplicates} already stored; {series_seen} series read."
        );
    }
    if !refused_series.is_empty() {
        let mut by_reason: BTreeMap<&str, usize> = BTreeMap::new();
        for (reason, _) in &refused_series {
            *by_reason.entry(reason).or_default() += 1;
        }
        let list: Vec<String> = by_reason.iter().map(|(r, n)| format!("{r}: {n}")).collect();
        println!(
            "Series not read (each said in the log): {}",
            list.join(", ")
        );
    }
    Ok(())
}
