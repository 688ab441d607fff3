//! The reading side of `import prometheus`: chunks read from Prometheus and made into each node's
//! batches, in order, ahead of the sending; and the slicemeter server as the importer asks it.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::DateTime;
use serde::Deserialize;

use crate::collector::import::prometheus::{Prometheus, QueryError, RawSeries};
use crate::collector::import::{self, ChunkPlan, Covered};
use crate::collector::shipper::Shipper;
use crate::collector::source::dcgm::read::ReadOptions;
use crate::collector::source::nvml::Sharing;
use crate::domain::batch::{Batch, Coverage};

/// The slicemeter server, as the importer uses it.
pub(super) struct Server {
    pub(super) client: reqwest::Client,
    pub(super) base: String,
    pub(super) token: String,
    pub(super) shipper: Shipper,
}

impl Server {
    pub(super) async fn get<T: for<'de> Deserialize<'de>>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> anyhow::Result<T> {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .query(query)
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("asking the server for {path}"))?;
        let status = r.status();
        if !status.is_success() {
            bail!(
                "the server answered {status} to {path}: {}",
                r.text().await.unwrap_or_default()
            );
        }
        Ok(r.json().await?)
    }

    async fn covered(&self, nodes: &[String], (from, to): (i64, i64)) -> anyhow::Result<Covered> {
        let at = |ms: i64| {
            DateTime::from_timestamp_millis(ms)
                .expect("in range")
                .to_rfc3339()
        };
        let mut out = Covered::new();
        for node in nodes {
            let c: Coverage = self
                .get(
                    "/v1/ingest/coverage",
                    &[("node", node.clone()), ("from", at(from)), ("to", at(to))],
                )
                .await?;
            let mut periods: Vec<(i64, i64)> = c
                .gpus
                .iter()
                .flat_map(|g| g.periods.iter())
                .map(|p| (p.start.timestamp_millis(), p.end.timestamp_millis()))
                .collect();
            periods.sort();
            let mut merged: Vec<(i64, i64)> = Vec::new();
            for (a, b) in periods {
                match merged.last_mut() {
                    Some(last) if last.1 >= a => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            out.insert(node.clone(), merged);
        }
        Ok(out)
    }
}

/// A chunk's series, asking again after a timeout or a server error (`retries` times).
async fn read_chunk(
    prometheus: &Prometheus,
    from: i64,
    to: i64,
    retries: u32,
) -> Result<Vec<RawSeries>, QueryError> {
    let mut series = Vec::new();
    for selector in import::chunk_selectors() {
        let mut tries = 0;
        loop {
            match prometheus.raw(&selector, from, to).await {
                Err(e) if e.transient && tries < retries => {
                    tries += 1;
                    tracing::warn!(error = %e, "Asking Prometheus again.");
                    tokio::time::sleep(Duration::from_secs(2 << tries)).await;
                }
                Err(e) => return Err(e),
                Ok(s) => {
                    series.extend(s);
                    break;
                }
            }
        }
    }
    Ok(series)
}

/// Where the reading side spent its time.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Timing {
    pub(super) querying: Duration,
    pub(super) reading: Duration,
}

/// One chunk read and made into batches, ready to send.
pub(super) struct Prepared {
    pub(super) chunk: (i64, i64),
    pub(super) month: String,
    pub(super) batches: Vec<Batch>,
    pub(super) series: usize,
    pub(super) refused: Vec<crate::collector::source::dcgm::Refusal>,
}

/// Reads chunks from Prometheus and makes them into batches, in order, ahead of the sending.
pub(super) struct Reader {
    pub(super) prometheus: Prometheus,
    pub(super) server: std::sync::Arc<Server>,
    pub(super) read: ReadOptions,
    pub(super) node_sharing: BTreeMap<String, Sharing>,
    pub(super) window_ms: i64,
    /// The scrape interval, given or once read from the samples.
    pub(super) interval_ms: Option<i64>,
    pub(super) retries: u32,
    pub(super) timing: Timing,
}

impl Reader {
    pub(super) async fn run(
        mut self,
        chunks: Vec<(i64, i64)>,
        out: tokio::sync::mpsc::Sender<anyhow::Result<Prepared>>,
    ) -> anyhow::Result<Timing> {
        for chunk in chunks {
            let prepared = self.chunk(chunk).await;
            let failed = prepared.is_err();
            if out.send(prepared).await.is_err() || failed {
                break;
            }
        }
        Ok(self.timing)
    }

    async fn chunk(&mut self, (c0, c1): (i64, i64)) -> anyhow::Result<Prepared> {
        let month = DateTime::from_timestamp_millis(c0)
            .expect("in range")
            .format("%Y-%m")
            .to_string();
        let started = std::time::Instant::now();
        let series = read_chunk(&self.prometheus, c0, c1, self.retries).await?;
        self.timing.querying += started.elapsed();
        let i = match self.interval_ms.or_else(|| interval_of(&series)) {
            Some(i) => i,
            None => {
                // No samples: nothing to send.
                return Ok(Prepared {
                    chunk: (c0, c1),
                    month,
                    batches: Vec::new(),
                    series: 0,
                    refused: Vec::new(),
                });
            }
        };
        if self.interval_ms.is_none() {
            eprintln!("Prometheus scraped the exporters every {i} ms.");
            self.interval_ms = Some(i);
        }
        if i <= 0 || self.window_ms % i != 0 {
            bail!(
                "the scrape interval ({i} ms) must divide --window ({} ms): give --scrape-interval or another --window",
                self.window_ms
            );
        }
        let plan = ChunkPlan {
            interval_ms: i,
            window_ms: self.window_ms,
            read: self.read,
            node_sharing: self.node_sharing.clone(),
        };
        let nodes = import::nodes_of(&series, &plan);
        let covered = self.server.covered(&nodes, (c0, c1)).await?;
        let started = std::time::Instant::now();
        let chunk = tokio::task::spawn_blocking(move || {
            import::chunk_batches(&series, (c0, c1), &plan, &covered)
        })
        .await?;
        self.timing.reading += started.elapsed();
        Ok(Prepared {
            chunk: (c0, c1),
            month,
            batches: chunk.batches.into_values().flatten().collect(),
            series: chunk.series,
            refused: chunk.refused,
        })
    }
}

/// The scrape interval the samples show: the most common step between a series' samples.
fn interval_of(series: &[RawSeries]) -> Option<i64> {
    let mut steps: BTreeMap<i64, usize> = BTreeMap::new();
    for s in series {
        for w in s.samples.windows(2) {
            // Prometheus aligns its scrapes to the millisecond; round to 10 ms all the same.
            let step = ((w[1].0 - w[0].0) as f64 / 10.0).round() as i64 * 10;
            if step > 0 {
                *steps.entry(step).or_default() += 1;
            }
        }
    }
    steps
        .into_iter()
        .max_by_key(|&(step, n)| (n, -step))
        .map(|(step, _)| step)
}
