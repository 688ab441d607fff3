//! `--source dcgm`: the node's NVIDIA dcgm-exporter page, read every sample interval, behind the same
//! [`Source`] trait as NVML and the simulator. It needs no NVML access and no privileges: the
//! exporter the GPU Operator already runs on each node has every figure slicemeter bills.
//!
//! `page` reads the text format, `read` turns one scrape's series into the node's inventory and
//! readings (shared with `import prometheus`, which reads the same series from Prometheus). What
//! cannot be read is said: each refused series is a log line (once per series and reason) and a
//! count on `slicemeter_collector_dcgm_refused_total{reason}`; a scrape that fails or times out
//! is time not observed (`SourceError::Missed`), never time held.

pub mod page;
pub mod read;
pub mod refusal;
pub mod slices;

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::nvml::Sharing;
use super::{Inventory, Reading, Source, SourceError, Timing};
use page::Series;
use read::{ConsumerLabels, ReadOptions};
pub use refusal::{Refusal, Refusals, Refused, ScrapeFailure};
use slices::SliceAt;

/// The largest page read: a 1,000-GPU exporter's page is about 30 MB.
pub const MAX_PAGE_BYTES: usize = 128 << 20;

/// Where the exporter is and how to read it.
#[derive(Debug, Clone)]
pub struct DcgmOptions {
    pub url: String,
    /// The node this collector reports for; the page's series of other nodes are refused.
    pub node: String,
    pub sharing: Sharing,
    /// How long one scrape may take.
    pub timeout: Duration,
}

pub struct DcgmSource {
    options: DcgmOptions,
    client: reqwest::Client,
    current: Option<(Inventory, Vec<SliceAt>)>,
    changed: bool,
    refusals: Refusals,
}

impl DcgmSource {
    pub fn new(options: DcgmOptions) -> Result<DcgmSource, SourceError> {
        let client = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.timeout)
            .build()
            .map_err(|e| SourceError::Unavailable(format!("the HTTP client: {e}")))?;
        Refusals::register_metrics();
        Ok(DcgmSource {
            options,
            client,
            current: None,
            changed: false,
            refusals: Refusals::default(),
        })
    }

    /// One scrape of the page, read into this node's devices.
    fn scrape(&mut self) -> Result<read::NodeScrape, (ScrapeFailure, String)> {
        let page = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(fetch(&self.client, &self.options.url))
        })?;
        let (mut series, mut refused) = (Vec::<Series>::new(), Vec::new());
        page::read(&page, &mut series, &mut refused);
        metrics::gauge!("slicemeter_collector_dcgm_series").set(series.len() as f64);
        let options = ReadOptions {
            consumers: ConsumerLabels::Plain,
            sharing: self.options.sharing,
        };
        let mut nodes = read::page_nodes(&series, &options, Some(&self.options.node), &mut refused);
        let own = nodes.remove(&self.options.node).unwrap_or_default();
        for (node, other) in nodes {
            refused.push(Refusal {
                reason: Refused::OtherNode,
                series: format!("{} GPUs of {node}", other.gpus.len()),
                detail: format!(
                    "this collector reports node {:?} only: a node reports its own GPUs",
                    self.options.node
                ),
            });
        }
        self.refusals.say(refused);
        Ok(own)
    }
}

/// The page at `url`, or why there is none.
pub async fn fetch(client: &reqwest::Client, url: &str) -> Result<String, (ScrapeFailure, String)> {
    let mut response = client.get(url).send().await.map_err(|e| {
        let kind = if e.is_timeout() {
            ScrapeFailure::Timeout
        } else {
            ScrapeFailure::Connect
        };
        (kind, format!("{url}: {e}"))
    })?;
    if !response.status().is_success() {
        return Err((
            ScrapeFailure::Status,
            format!("{url} answered {}", response.status()),
        ));
    }
    let mut body = Vec::new();
    loop {
        let chunk = response.chunk().await.map_err(|e| {
            let kind = if e.is_timeout() {
                ScrapeFailure::Timeout
            } else {
                ScrapeFailure::Connect
            };
            (kind, format!("{url}: reading the page: {e}"))
        })?;
        let Some(chunk) = chunk else { break };
        if body.len() + chunk.len() > MAX_PAGE_BYTES {
            return Err((
                ScrapeFailure::TooLarge,
                format!("{url}: the page is over {MAX_PAGE_BYTES} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8(body)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

fn missed(kind: ScrapeFailure, reason: String) -> SourceError {
    metrics::counter!("slicemeter_collector_dcgm_scrape_failures_total", "reason" => kind.as_str())
        .increment(1);
    SourceError::Missed(reason)
}

impl Source for DcgmSource {
    fn node(&self) -> &str {
        &self.options.node
    }

    /// The inventory of the last scrape; the first waits for the exporter (up to 30 s: it may
    /// start after the collector).
    fn inventory(&mut self) -> Result<Inventory, SourceError> {
        if let Some((inventory, _)) = &self.current {
            return Ok(inventory.clone());
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let scrape = loop {
            match self.scrape() {
                Ok(s) => break s,
                Err((kind, reason)) => {
                    let e = missed(kind, reason);
                    if std::time::Instant::now() > deadline {
                        return Err(SourceError::Unavailable(format!(
                            "dcgm-exporter did not answer for 30 s: {e}"
                        )));
                    }
                    tracing::info!(error = %e, "Waiting for dcgm-exporter.");
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        };
        let mut refused = Vec::new();
        let current = scrape.inventory(self.options.sharing, &mut refused);
        self.refusals.say(refused);
        let inventory = current.0.clone();
        self.current = Some(current);
        Ok(inventory)
    }

    fn sample(&mut self, _at: DateTime<Utc>) -> Result<Vec<Reading>, SourceError> {
        let scrape = self
            .scrape()
            .map_err(|(kind, reason)| missed(kind, reason))?;
        let mut refused = Vec::new();
        let now = scrape.inventory(self.options.sharing, &mut refused);
        if self.current.as_ref().is_none_or(|(i, _)| *i != now.0) {
            if self.current.is_some() {
                tracing::info!(
                    gpus = now.0.gpus.len(),
                    slices = now.0.slices.len(),
                    "The exporter's GPUs or MIG instances changed; the windows so far are closed."
                );
                self.changed = true;
            }
            self.current = Some(now);
        }
        let at = &self.current.as_ref().expect("set above").1;
        let readings = scrape.readings(at, &mut refused);
        self.refusals.say(refused);
        Ok(readings)
    }

    fn timing(&self) -> Timing {
        Timing::Slotted
    }

    fn inventory_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }
}
