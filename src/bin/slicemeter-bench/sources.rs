//! `sources`: what reading the fleet's own sources costs. (1) One scrape of a dcgm-exporter page of
//! `--page-gpus` GPUs (a simulated fleet's, as the exporter writes it), read as `collect --source
//! dcgm` reads it (parse, series keys, inventory, readings), against a plain scan of the page's
//! lines in the same run; its share of one core at a 5 s sample interval. (2) `import prometheus`
//! of a month of `--gpus` GPUs from a real Prometheus (Debian's package) serving blocks written
//! with `promtool tsdb create-blocks-from openmetrics`, into a server on loopback: its time and
//! windows a second.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use slicemeter::cli::import::{ConsumerLabelsArg, ImportCommand, PrometheusArgs};
use slicemeter::collector::source::Source;
use slicemeter::collector::source::dcgm::page;
use slicemeter::collector::source::dcgm::read::{self, ConsumerLabels, ReadOptions};
use slicemeter::collector::source::nvml::Sharing;
use slicemeter::domain::access::{Actor, Role};
use slicemeter::domain::time::Month;
use slicemeter::http::state::ServerConfig;
use slicemeter::sim::SimFleet;
use slicemeter::sim::dcgm::ExporterPage;
use slicemeter::sim::prometheus::{LocalPrometheus, binary};
use slicemeter::sim::source::SimSource;

use crate::common::{Loopback, in_scratch_schema, percentile, publish_example_card};

#[derive(Debug, clap::Args)]
pub struct SourcesBenchArgs {
    /// The database to work in (a scratch schema is created and dropped); without one, a private
    /// PostgreSQL is started for the run.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// GPUs on the one exporter page read.
    #[arg(long, default_value_t = 1000)]
    pub page_gpus: usize,
    /// GPUs of the month imported.
    #[arg(long, default_value_t = 100)]
    pub gpus: usize,
    /// Days of it imported (from the start of last month).
    #[arg(long, default_value_t = 30)]
    pub days: u32,
    /// Prometheus' scrape interval in the blocks written.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub scrape_interval: Duration,
    /// Time one query reads, and one node's batch reports on.
    #[arg(long, default_value = "6h", value_parser = humantime::parse_duration)]
    pub chunk: Duration,
    /// Scrapes of the page timed (the median is printed).
    #[arg(long, default_value_t = 7)]
    pub repeat: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// A size that runs in seconds (a 20-GPU page, 4 GPUs for 6 hours): CI runs it so that the
    /// benchmark cannot rot.
    #[arg(long)]
    pub smoke: bool,
}

/// One page holding every GPU of a simulated fleet at one instant, as one exporter would serve it.
fn fleet_page(gpus: usize, seed: u64, at: chrono::DateTime<Utc>) -> anyhow::Result<String> {
    let fleet = SimFleet::generate(seed, gpus);
    let mut all = ExporterPage {
        hostname_label: "hostname",
        hostname: "bench-node".into(),
        virtual_gpus: true,
        gpus: Vec::new(),
    };
    for node in &fleet.nodes {
        let mut source = SimSource::new(&fleet, &node.name)?;
        let inventory = source.inventory()?;
        let readings = source.sample(at)?;
        let page = ExporterPage::of_sim("hostname", &node.name, &inventory, &readings);
        for mut g in page.gpus {
            g.index = all.gpus.len() as u32;
            all.gpus.push(g);
        }
    }
    Ok(all.render())
}

fn parse_page(args: &SourcesBenchArgs) -> anyhow::Result<()> {
    let gpus = if args.smoke { 20 } else { args.page_gpus };
    let text = fleet_page(gpus, args.seed, Utc::now())?;
    let options = ReadOptions {
        consumers: ConsumerLabels::Plain,
        sharing: Sharing::None,
    };
    let mut scan = Vec::new();
    let mut read_times = Vec::new();
    let (mut series, mut slices) = (0, 0);
    for _ in 0..args.repeat.max(1) {
        // The floor: every line looked at once, as any reader must.
        let t = Instant::now();
        let lines = text.lines().filter(|l| !l.starts_with('#')).count();
        scan.push(t.elapsed());
        std::hint::black_box(lines);
        let t = Instant::now();
        let (mut read, mut refused) = (Vec::new(), Vec::new());
        page::read(&text, &mut read, &mut refused);
        let nodes = read::page_nodes(&read, &options, Some("bench-node"), &mut refused);
        for node in nodes.values() {
            let (inventory, at) = node.inventory(Sharing::None, &mut refused);
            let readings = node.readings(&at, &mut refused);
            slices = inventory.slices.len();
            std::hint::black_box(readings);
        }
        read_times.push(t.elapsed());
        series = read.len();
    }
    scan.sort();
    read_times.sort();
    let (floor, took) = (percentile(&scan, 0.5), percentile(&read_times, 0.5));
    println!(
        "dcgm page: {gpus} GPUs, {} KB, {} series lines ({series} of them read), {slices} slices",
        text.len() / 1024,
        text.lines().filter(|l| !l.starts_with('#')).count()
    );
    println!(
        "  one scrape read: {:.1} ms (median of {}); at a 5 s sample interval, {:.2} % of one core",
        took.as_secs_f64() * 1e3,
        read_times.len(),
        took.as_secs_f64() / 5.0 * 100.0
    );
    println!(
        "  baseline, a scan of its lines: {:.1} ms; the read is {:.1}x it",
        floor.as_secs_f64() * 1e3,
        took.as_secs_f64() / floor.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// Writes `[from, to)` of a simulated fleet as Prometheus would have scraped its exporters every
/// `interval` into blocks under `storage`, a day an OpenMetrics file.
fn write_blocks(
    fleet: &SimFleet,
    (from, to): (chrono::DateTime<Utc>, chrono::DateTime<Utc>),
    interval: Duration,
    storage: &std::path::Path,
) -> anyhow::Result<u64> {
    let promtool = binary("promtool").map_err(anyhow::Error::msg)?;
    let mut sources = Vec::new();
    for node in &fleet.nodes {
        sources.push(SimSource::new(fleet, &node.name)?);
    }
    let inventories: Vec<_> = sources
        .iter_mut()
        .map(|s| s.inventory())
        .collect::<Result<_, _>>()?;
    let step = chrono::Duration::from_std(interval)?;
    let mut samples = 0u64;
    let mut day = from;
    let families = [
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    ];
    while day < to {
        let end = (day + chrono::Duration::days(1)).min(to);
        // Each scrape's page of every node, then a family at a time over the day.
        let mut pages = Vec::new();
        let mut t = day;
        while t < end {
            for (k, s) in sources.iter_mut().enumerate() {
                let readings = s.sample(t)?;
                pages.push((
                    t.timestamp(),
                    ExporterPage::of_sim("hostname", s.node(), &inventories[k], &readings),
                ));
            }
            t += step;
        }
        let mut text = String::new();
        for family in families {
            ExporterPage::openmetrics_head(&mut text, family);
            for (ts, page) in &pages {
                page.openmetrics_samples(&mut text, family, *ts);
            }
        }
        text.push_str("# EOF\n");
        samples += text.lines().count() as u64;
        let file = storage.join("day.om");
        std::fs::write(&file, &text)?;
        let out = std::process::Command::new(&promtool)
            .args([
                "tsdb",
                "create-blocks-from",
                "--max-block-duration=24h",
                "openmetrics",
            ])
            .arg(&file)
            .arg(storage)
            .output()
            .context("running promtool")?;
        if !out.status.success() {
            bail!("promtool failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::fs::remove_file(&file)?;
        day = end;
    }
    Ok(samples)
}

async fn import_month(args: &SourcesBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let (gpus, hours) = if args.smoke {
        (4, 6)
    } else {
        (args.gpus, i64::from(args.days) * 24)
    };
    let month = Month::of(Utc::now()).minus(1);
    let from = month.start();
    let to = from + chrono::Duration::hours(hours);
    let fleet = SimFleet::generate(args.seed, gpus);
    publish_example_card(&pool, month).await?;
    slicemeter::cli::demo::register_teams(&pool, &fleet).await?;
    let dir = crate::common::tempfile_path("sources");
    let storage = dir.join("prometheus");
    std::fs::create_dir_all(&storage)?;
    let started = Instant::now();
    let samples = {
        let (fleet, storage, interval) = (fleet.clone(), storage.clone(), args.scrape_interval);
        tokio::task::spawn_blocking(move || write_blocks(&fleet, (from, to), interval, &storage))
            .await??
    };
    eprintln!(
        "wrote {samples} samples of {gpus} GPUs, {hours} h, into Prometheus blocks in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let prometheus = {
        let storage = storage.clone();
        tokio::task::spawn_blocking(move || {
            LocalPrometheus::start(&storage, &[], Duration::from_secs(15))
        })
        .await?
        .map_err(anyhow::Error::msg)?
    };
    let server = Loopback::start(
        &pool,
        ServerConfig {
            ingest_rate: 0.0,
            ..ServerConfig::default()
        },
    )
    .await?;
    let (_, token) = slicemeter::auth::store::create(
        &pool,
        Role::Importer,
        None,
        None,
        Some("bench import"),
        None,
        &Actor::CLI,
    )
    .await?;
    let state = dir.join("import.state.json");
    let started = Instant::now();
    slicemeter::cli::import::run(ImportCommand::Prometheus(Box::new(PrometheusArgs {
        url: prometheus.url.clone(),
        from,
        to,
        server: server.base.clone(),
        token: Some(token),
        token_file: None,
        prometheus_token: None,
        prometheus_user: None,
        prometheus_password: None,
        prometheus_password_file: None,
        scrape_interval: Some(args.scrape_interval),
        window: Duration::from_secs(60),
        chunk: if args.smoke {
            Duration::from_secs(3600)
        } else {
            args.chunk
        },
        gpu_sharing: Sharing::None,
        node_sharing: Vec::new(),
        consumer_labels: ConsumerLabelsArg::Plain,
        retries: 2,
        query_timeout: Duration::from_secs(120),
        max_answer_bytes: 1 << 30,
        in_flight: 8,
        state,
        dry_run: false,
    })))
    .await?;
    let took = started.elapsed();
    let windows: i64 = sqlx::query_scalar("select count(*) from occupancy")
        .fetch_one(&pool)
        .await?;
    let mut line = String::new();
    let _ = write!(
        line,
        "import prometheus: {gpus} GPUs x {hours} h at a {} s scrape interval, {} chunks: {windows} windows in {:.1} s, {:.0} windows/s",
        args.scrape_interval.as_secs(),
        humantime::format_duration(args.chunk),
        took.as_secs_f64(),
        windows as f64 / took.as_secs_f64()
    );
    println!("{line}");
    server.stop().await?;
    drop(prometheus);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

pub async fn sources(args: SourcesBenchArgs) -> anyhow::Result<()> {
    parse_page(&args)?;
    in_scratch_schema(args.database_url.as_deref(), 8, |pool, _| {
        import_month(&args, pool)
    })
    .await
}
