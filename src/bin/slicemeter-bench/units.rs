//! `units`: the unit cost of a month of `--gpus` GPUs for every team (`units::service`, as the
//! report, the gauge and the team page read it), against a real Prometheus (Debian's package)
//! serving the simulated vLLM counters of the fleet's chat pods (`sim::vllm`, scraped every
//! minute), written into blocks with `promtool tsdb create-blocks-from openmetrics`. Printed beside
//! its two parts measured alone in the same run: the usage report it prices from, and the counters
//! read and counted; then the month's hours counted and kept (`units::counts`, as the server's
//! background step keeps them) and the unit cost again, from the kept counts, to the same figures.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use slicemeter::collector::import::prometheus::Auth;
use slicemeter::domain::time::Month;
use slicemeter::reports::service::{self as reports, ReportCache};
use slicemeter::reports::usage::{GroupBy, PodHourCosts, Step, UsageReport};
use slicemeter::sim::SimFleet;
use slicemeter::sim::prometheus::{LocalPrometheus, binary};
use slicemeter::sim::vllm::{self, GENERATION_TOKENS};
use slicemeter::units::UnitDefinition;
use slicemeter::units::cost::UnitGroupBy;
use slicemeter::units::count::Increases;
use slicemeter::units::counts;
use slicemeter::units::service::{self, UnitSource};

use crate::common::{in_scratch_schema, load_month};

#[derive(Debug, clap::Args)]
pub struct UnitsBenchArgs {
    /// The database to work in (a scratch schema is created and dropped); without one, a private
    /// PostgreSQL is started for the run.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// GPUs in the simulated fleet.
    #[arg(long, default_value_t = 1000)]
    pub gpus: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// A size that runs in seconds (8 GPUs): CI runs it so that the benchmark cannot rot.
    #[arg(long)]
    pub smoke: bool,
    /// Only the costs' side (the pod-hour costs and their sums), then the whole unit cost from the
    /// kept counts (no Prometheus needed), `--rounds` times, over the month a run kept
    /// (`SLICEMETER_BENCH_KEEP=1`) in this schema: a build against another on the same rows,
    /// without loading the month again.
    #[arg(long)]
    pub costs_of_schema: Option<String>,
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// With `--costs-of-schema`: writes the last round's pod-hour costs and unit cost reports to
    /// this file (JSON), so that two builds' answers on the same rows can be compared byte by byte.
    #[arg(long)]
    pub write_answers: Option<std::path::PathBuf>,
    /// Only the counters' side: the month's counters read and counted from this Prometheus
    /// (one holding a month a run wrote, e.g. started on a copy of its storage), `--rounds`
    /// times, through remote read and, the baseline, through the query API only.
    #[arg(long)]
    pub counters_of: Option<String>,
}

/// Writes the chat pods' counters over `month`, a day an OpenMetrics file, into blocks under
/// `storage`; returns the samples written.
fn write_blocks(fleet: &SimFleet, month: Month, storage: &std::path::Path) -> anyhow::Result<u64> {
    let promtool = binary("promtool").map_err(anyhow::Error::msg)?;
    let mut samples = 0u64;
    let mut day = month.start();
    while day < month.end() {
        let end = day + chrono::Duration::days(1);
        let mut text = format!("# TYPE {GENERATION_TOKENS} counter\n");
        for s in vllm::generation_tokens(
            fleet,
            day.timestamp_millis() - 1,
            end.timestamp_millis() - 1,
        ) {
            let labels: Vec<String> = s
                .labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect();
            let labels = labels.join(",");
            for (t, v) in &s.samples {
                text.push_str(&format!(
                    "{GENERATION_TOKENS}{{{labels}}} {v} {}.{:03}\n",
                    t.div_euclid(1000),
                    t.rem_euclid(1000)
                ));
                samples += 1;
            }
        }
        text.push_str("# EOF\n");
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

// long: one run's steps in order, each timed beside the others of the same run and checked against
// them (the same costs, the same counts, the same report)
async fn run(args: &UnitsBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let month = Month::of(Utc::now()).minus(1);
    let gpus = if args.smoke { 8 } else { args.gpus };
    load_month(&pool, gpus, args.seed, month).await?;
    let fleet = SimFleet::generate(args.seed, gpus);
    let dir = crate::common::tempfile_path("units");
    let storage = dir.join("prometheus");
    std::fs::create_dir_all(&storage)?;
    let started = Instant::now();
    let samples = {
        let (fleet, storage) = (fleet.clone(), storage.clone());
        tokio::task::spawn_blocking(move || write_blocks(&fleet, month, &storage)).await??
    };
    eprintln!(
        "wrote {samples} counter samples of {gpus} GPUs' chat pods, {month}, into Prometheus blocks in {:.1} s",
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
    let (source, query_api, def) = both_ways(&prometheus.url)?;
    slicemeter::units::store::put(&pool, &def, &slicemeter::domain::access::Actor::CLI).await?;
    let (from, to) = (month.start(), month.end());
    let by: [UnitGroupBy; 2] = [
        "team".parse().map_err(anyhow::Error::msg)?,
        "team,model".parse().map_err(anyhow::Error::msg)?,
    ];
    // The whole unit cost, on a cache of its own (nothing kept between two calls).
    let unit_cost = async |source: &UnitSource| {
        service::unit_costs(
            &pool,
            &ReportCache::new(Duration::ZERO),
            source,
            &def,
            from,
            to,
            &by,
            None,
        )
        .await
    };
    // Each part alone, then the whole, each on a cache of its own (nothing kept between them).
    let (inc, counters, query_api_counters) =
        counters_both_ways(&source, &query_api, &def, from, to).await?;
    let dims: GroupBy = "team,namespace,workload,pod"
        .parse()
        .map_err(anyhow::Error::msg)?;
    let t = Instant::now();
    let usage = reports::usage_report(
        &pool,
        &ReportCache::new(Duration::ZERO),
        from,
        to,
        &dims,
        Step::Hour,
        None,
    )
    .await?;
    let usage_time = t.elapsed();
    // The report's SQL alone (the rollups summed per hour, pod and invoice line, rows decoded).
    let t = Instant::now();
    let sums =
        slicemeter::reports::store::usage_sums(&pool, from, to, &dims, Step::Hour, None).await?;
    let sql_time = t.elapsed();
    // What the unit cost reads: each pod-hour's cost alone, its sums alone (the hourly rows read
    // and summed, `reports::pod_hours`), and the month's bill it adds up to alone.
    let t = Instant::now();
    let row_costs =
        reports::pod_hour_costs(&pool, &ReportCache::new(Duration::ZERO), from, to, None).await?;
    let costs_time = t.elapsed();
    let t = Instant::now();
    let cost_sums = slicemeter::reports::pod_hours::sums(&pool, from, to, None).await?;
    let cost_sql_time = t.elapsed();
    let t = Instant::now();
    reports::month(&pool, &ReportCache::new(Duration::ZERO), month).await?;
    let bill_time = t.elapsed();
    // Exact: the very costs the usage report gives its rows.
    same_costs(&usage, &row_costs)?;
    let t = Instant::now();
    let unit_costs = unit_cost(&source).await?;
    let took = t.elapsed();
    let t = Instant::now();
    let query_api_costs = unit_cost(&query_api).await?;
    let query_api_took = t.elapsed();
    anyhow::ensure!(
        query_api_costs == unit_costs,
        "the unit cost through the query API differs from the one through remote read"
    );
    let teams = &unit_costs[0];
    anyhow::ensure!(
        !teams.rows.is_empty(),
        "the unit cost has no row: {teams:?}"
    );
    println!(
        "unit cost, {gpus} GPUs, {month}, every team, counters from Prometheus (remote read): {:.2} s; through its query API: {:.2} s ({} teams, {} team x model rows; total {} {} per 1M tokens over {} tokens; the same figures both ways)",
        took.as_secs_f64(),
        query_api_took.as_secs_f64(),
        teams.rows.len(),
        unit_costs[1].rows.len(),
        teams.currency.as_deref().unwrap_or("?"),
        teams
            .total
            .unit_cost
            .map_or("none".to_owned(), |c| c.to_string()),
        teams.total.units
    );
    println!(
        "  alone: counters read and counted {:.2} s through remote read, {:.2} s through the query API ({samples} samples, {} hour x pod increases, the same both ways); usage report {:.2} s ({} hour x pod rows; its SQL alone {:.2} s, {} rows of sums); its costs alone {:.2} s ({} rows, as the report's; their sums alone {:.2} s, {} rows; the month's bill alone {:.2} s)",
        counters.as_secs_f64(),
        query_api_counters.as_secs_f64(),
        inc.hours.len(),
        usage_time.as_secs_f64(),
        usage.rows.len(),
        sql_time.as_secs_f64(),
        sums.len(),
        costs_time.as_secs_f64(),
        row_costs.rows.len(),
        cost_sql_time.as_secs_f64(),
        cost_sums.rows.len(),
        bill_time.as_secs_f64()
    );
    // The month's hours counted and kept as the server's step keeps them an hour after its end,
    // then the unit cost again: the kept counts read instead of Prometheus, to the same figures.
    let t = Instant::now();
    counts::keep(&pool, &source, to + chrono::Duration::hours(1)).await?;
    let keep_time = t.elapsed();
    let kept_rows: i64 = sqlx::query_scalar("select count(*) from unit_hour_count")
        .fetch_one(&pool)
        .await?;
    let t = Instant::now();
    let kept_inc = service::counted(&pool, &source, &def, from, to).await?;
    let kept_read = t.elapsed();
    anyhow::ensure!(
        kept_inc.hours == inc.hours,
        "the kept counts ({} hour x pod increases) differ from Prometheus' ({})",
        kept_inc.hours.len(),
        inc.hours.len()
    );
    let t = Instant::now();
    let kept_costs = unit_cost(&source).await?;
    let kept_took = t.elapsed();
    anyhow::ensure!(
        kept_costs == unit_costs,
        "the unit cost from the kept counts differs from the one read from Prometheus"
    );
    println!(
        "unit cost, {gpus} GPUs, {month}, every team, from the kept counts: {:.2} s (the same figures); the month counted and kept {:.2} s ({kept_rows} rows); the kept counts read alone {:.2} s",
        kept_took.as_secs_f64(),
        keep_time.as_secs_f64(),
        kept_read.as_secs_f64()
    );
    let met = |d: Duration| {
        if d.as_secs_f64() < 5.0 {
            "met"
        } else {
            "NOT met"
        }
    };
    println!(
        "  target < 5 s: from Prometheus (remote read) {}; from the kept counts {}",
        met(took),
        met(kept_took)
    );
    drop(prometheus);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

pub async fn units(args: UnitsBenchArgs) -> anyhow::Result<()> {
    if let Some(schema) = &args.costs_of_schema {
        return costs_of_schema(&args, schema).await;
    }
    if let Some(url) = &args.counters_of {
        return counters_of(&args, url).await;
    }
    in_scratch_schema(args.database_url.as_deref(), 8, |pool, _| run(&args, pool)).await
}

/// `--costs-of-schema`: the pod-hour costs and their sums alone on a kept month, round after round.
async fn costs_of_schema(args: &UnitsBenchArgs, schema: &str) -> anyhow::Result<()> {
    let url = args
        .database_url
        .as_deref()
        .context("--costs-of-schema needs DATABASE_URL")?;
    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    let pool = slicemeter::db::connect_with(options.options([("search_path", schema)]), 8).await?;
    slicemeter::db::migrate(&pool).await?;
    let month = Month::of(Utc::now()).minus(1);
    let (from, to) = (month.start(), month.end());
    for round in 1..=args.rounds {
        let t = Instant::now();
        let sums = slicemeter::reports::pod_hours::sums(&pool, from, to, None).await?;
        let sql = t.elapsed();
        let t = Instant::now();
        let costs =
            reports::pod_hour_costs(&pool, &ReportCache::new(Duration::ZERO), from, to, None)
                .await?;
        let all = t.elapsed();
        let total: rust_decimal::Decimal = costs.rows.iter().filter_map(|r| r.cost).sum();
        println!(
            "round {round}: pod-hour costs {:.2} s ({} rows, {} {total}); their sums alone {:.2} s ({} rows of sums)",
            all.as_secs_f64(),
            costs.rows.len(),
            costs.currency.as_ref().map_or("?", |c| c.code.as_str()),
            sql.as_secs_f64(),
            sums.rows.len()
        );
        let Some(def) = slicemeter::units::store::get(&pool, "generated_tokens").await? else {
            continue;
        };
        // Every hour of the month is kept: a Prometheus nothing listens on is never asked.
        let nowhere = UnitSource {
            url: "http://127.0.0.1:9".into(),
            auth: Auth::None,
            timeout: Duration::from_secs(1),
            max_answer_bytes: 1 << 20,
            remote_read: true,
        };
        let by: [UnitGroupBy; 2] = [
            "team".parse().map_err(anyhow::Error::msg)?,
            "team,model".parse().map_err(anyhow::Error::msg)?,
        ];
        let cache = ReportCache::new(Duration::ZERO);
        let unit_costs = async || {
            service::unit_costs(
                &pool,
                &cache,
                &nowhere,
                &def.definition,
                from,
                to,
                &by,
                None,
            )
            .await
        };
        let t = Instant::now();
        let reports = unit_costs().await?;
        let took = t.elapsed();
        // Again on the same cache, the database unchanged: the sums and the month's bill are held,
        // what is left is the pricing, the join and the kept counts' read (what the unit cost
        // would take were the sums kept, not read and summed).
        let t = Instant::now();
        let again = unit_costs().await?;
        let held = t.elapsed();
        anyhow::ensure!(again == reports, "the unit cost on held sums differs");
        if let (Some(path), true) = (&args.write_answers, round == args.rounds) {
            let costs: Vec<_> = costs
                .by_name()
                .into_iter()
                .map(|((hour, key), cost)| (hour, key, cost))
                .collect();
            let answers = serde_json::json!({"pod_hour_costs": costs, "unit_costs": &reports});
            std::fs::write(path, serde_json::to_vec(&answers)?)?;
        }
        println!(
            "round {round}: unit cost from the kept counts {:.2} s ({} team rows; {} {} per 1M tokens); again with the sums and bill held {:.2} s",
            took.as_secs_f64(),
            reports[0].rows.len(),
            reports[0].currency.as_deref().unwrap_or("?"),
            reports[0]
                .total
                .unit_cost
                .map_or("none".to_owned(), |c| c.to_string()),
            held.as_secs_f64()
        );
    }
    Ok(())
}

/// The Prometheus at `url` read through remote read, and through its query API only (the same-run
/// baseline), and the unit they count: the ready-made `generated_tokens`.
fn both_ways(url: &str) -> anyhow::Result<(UnitSource, UnitSource, UnitDefinition)> {
    let source = UnitSource {
        url: url.to_owned(),
        auth: Auth::None,
        timeout: Duration::from_secs(120),
        max_answer_bytes: 1 << 30,
        remote_read: true,
    };
    let query_api = UnitSource {
        remote_read: false,
        ..source.clone()
    };
    let def = slicemeter::units::presets()
        .into_iter()
        .find(|p| p.name == "generated_tokens")
        .context("the ready-made generated_tokens unit")?;
    Ok((source, query_api, def))
}

/// The counters of `[from, to)` read and counted through remote read (`source`), then through the
/// query API only, each timed; fails unless both give the same increases.
async fn counters_both_ways(
    source: &UnitSource,
    query_api: &UnitSource,
    def: &UnitDefinition,
    from: chrono::DateTime<Utc>,
    to: chrono::DateTime<Utc>,
) -> anyhow::Result<(Increases, Duration, Duration)> {
    let t = Instant::now();
    let inc = service::increases(source, def, from, to, None).await?;
    let remote = t.elapsed();
    let t = Instant::now();
    let baseline = service::increases(query_api, def, from, to, None).await?;
    let query = t.elapsed();
    anyhow::ensure!(
        baseline.hours == inc.hours,
        "the increases read through remote read ({} hour x pod) differ from the query API's ({})",
        inc.hours.len(),
        baseline.hours.len()
    );
    Ok((inc, remote, query))
}

/// `--counters-of`: the counters read and counted alone, round after round, both ways.
async fn counters_of(args: &UnitsBenchArgs, url: &str) -> anyhow::Result<()> {
    let month = Month::of(Utc::now()).minus(1);
    let (from, to) = (month.start(), month.end());
    let (source, query_api, def) = both_ways(url)?;
    for round in 1..=args.rounds {
        let (inc, remote, query) = counters_both_ways(&source, &query_api, &def, from, to).await?;
        println!(
            "round {round}: counters read and counted {:.2} s through remote read, {:.2} s through the query API ({} hour x pod increases, the same both ways)",
            remote.as_secs_f64(),
            query.as_secs_f64(),
            inc.hours.len()
        );
    }
    Ok(())
}

/// Fails unless every pod-hour's cost the unit cost reads is the usage report's row for that hour
/// and pod.
fn same_costs(usage: &UsageReport, row_costs: &PodHourCosts) -> anyhow::Result<()> {
    let names = ["team", "namespace", "workload", "pod"];
    let report_costs: BTreeMap<_, _> = usage
        .rows
        .iter()
        .map(|r| {
            let key: Vec<Option<String>> = names
                .iter()
                .map(|n| r.key.get(*n).cloned().flatten())
                .collect();
            ((r.bucket, key), r.figures.cost)
        })
        .collect();
    anyhow::ensure!(
        report_costs == row_costs.by_name(),
        "the pod-hour costs ({} rows) differ from the usage report's ({} rows)",
        row_costs.rows.len(),
        report_costs.len()
    );
    Ok(())
}
