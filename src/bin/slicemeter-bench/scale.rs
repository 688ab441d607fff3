//! `scale`: a month of a large fleet written straight into the rollups with SQL (as fast as the
//! schema takes it, no ingest), then the month read as finance and the dashboard read it: the
//! monthly report, the invoice run, the usage report by day and the FOCUS export (first byte and
//! total), each against one `GROUP BY` over the same rollups in the same run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::StreamExt;
use slicemeter::billing::service as billing;
use slicemeter::db;
use slicemeter::domain::access::Actor;
use slicemeter::domain::time::Month;
use slicemeter::reports::exports::{self, ExportConfig};
use slicemeter::reports::service as reports;
use slicemeter::reports::store as report_store;
use slicemeter::reports::usage::{GroupBy, Step};

use crate::common::{group_by_floor, in_scratch_schema, publish_example_card};

#[derive(Debug, clap::Args)]
pub struct ScaleBenchArgs {
    /// The database to work in (a scratch schema is created and dropped); without one, a private
    /// PostgreSQL is started for the run.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// GPUs, each cut into seven 1g slices, eight to a node.
    #[arg(long, default_value_t = 10_000)]
    pub gpus: usize,
    /// Days of last month written (at most the month's).
    #[arg(long, default_value_t = 30)]
    pub days: u32,
    /// A size that runs in seconds (16 GPUs, 2 days): CI runs it so that the benchmark cannot rot.
    #[arg(long)]
    pub smoke: bool,
}

pub async fn scale(args: ScaleBenchArgs) -> anyhow::Result<()> {
    in_scratch_schema(args.database_url.as_deref(), 4, |pool, _| run(&args, pool)).await
}

/// Writes `gpus` GPUs of seven 1g.10gb slices each, one consumer per slice over eight teams, and
/// `days` of hourly and daily rollups (each slice held four hours in five) and presence.
async fn write_month(
    pool: &sqlx::PgPool,
    gpus: usize,
    days: u32,
    month: Month,
) -> anyhow::Result<i64> {
    db::Partitions::default()
        .ensure(pool, &[month.first_day()])
        .await?;
    let start = month.start();
    let end = (start + chrono::Duration::days(i64::from(days))).min(month.end());
    let statements = [
        "insert into team (team_id, display_name, cost_center, gl_account)
         select 'team-' || t, 'Team ' || t, 'CC-' || t, '6420' from generate_series(1, 8) t",
        "insert into team_namespace (namespace, team_id)
         select 'ns-' || t, 'team-' || t from generate_series(1, 8) t",
        "insert into gpu (gpu_uuid, node, model, memory_bytes, compute_slices, memory_slices, mig_enabled)
         select 'GPU-scale-' || g, 'node-' || (g / 8),
                (array['NVIDIA H100 80GB HBM3', 'NVIDIA H200', 'NVIDIA A100-SXM4-80GB'])[1 + g % 3],
                85520809984, 7, 8, true
         from generate_series(0, $3 - 1) g",
        "insert into slice (slice_uuid, gpu_id, kind, profile, profile_id, compute_slices,
                            memory_slices, memory_bytes, compute_share, memory_share,
                            memory_reserved_bytes, reserved)
         select 'MIG-scale-' || g.gpu_id || '-' || k, g.gpu_id, 'mig', '1g.10gb', 19, 1, 1,
                10468982784, 1.0 / 7, 0.125, 10468982784, true
         from gpu g, generate_series(0, 6) k",
        "insert into consumer (fingerprint, namespace, pod, container, team_id)
         select sha256(convert_to(s.slice_uuid, 'UTF8')), 'ns-' || (1 + s.slice_id % 8),
                s.slice_uuid, 'main', 'team-' || (1 + s.slice_id % 8)
         from slice s",
        "insert into usage_hourly
         select h, s.slice_id, c.consumer_id, 3600, 3600 * 5e9, 5000000000, 1800, 3600, 1
         from slice s join consumer c on c.pod = s.slice_uuid,
              generate_series($1, $2 - interval '1 hour', interval '1 hour') h
         where (s.slice_id + extract(hour from h at time zone 'UTC')::int) % 5 <> 0",
        "insert into usage_daily
         select date_trunc('day', hour, 'UTC'), slice_id, consumer_id, sum(held_seconds),
                sum(memory_byte_seconds), max(memory_peak_bytes), sum(compute_active_seconds),
                sum(compute_known_seconds), sum(window_count)
         from usage_hourly group by 1, 2, 3",
        "insert into gpu_hourly
         select h, g.gpu_id, 3600
         from gpu g, generate_series($1, $2 - interval '1 hour', interval '1 hour') h",
        "insert into gpu_daily
         select date_trunc('day', hour, 'UTC'), gpu_id, sum(present_seconds) from gpu_hourly
         group by 1, 2",
        "analyze",
    ];
    for sql in statements {
        let n = sql.matches('$').count();
        let mut q = sqlx::query(sql);
        if n > 0 {
            q = q.bind(start).bind(end);
        }
        if sql.contains("$3") {
            q = q.bind(gpus as i64);
        }
        q.execute(pool).await?;
    }
    Ok(sqlx::query_scalar("select count(*) from usage_hourly")
        .fetch_one(pool)
        .await?)
}

fn line(what: &str, time: Duration, floor: Duration, detail: &str) {
    println!(
        "{what:<32} {:>9.3} s  {:>7.2}x the floor  {detail}",
        time.as_secs_f64(),
        time.as_secs_f64() / floor.as_secs_f64()
    );
}

async fn run(args: &ScaleBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let month = Month::of(Utc::now()).minus(1);
    let (gpus, days) = if args.smoke {
        (16, 2)
    } else {
        (args.gpus, args.days)
    };
    publish_example_card(&pool, month).await?;
    let t = Instant::now();
    let rows = write_month(&pool, gpus, days, month).await?;
    println!(
        "wrote {gpus} GPUs x {days} days of {month}: {rows} hourly rollup rows in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (teams, floor) = group_by_floor(&pool, month).await?;
    anyhow::ensure!(teams == 8, "the floor found {teams} teams, not 8");
    line("SELECT sum() GROUP BY team", floor, floor, "(the floor)");

    let now = Utc::now();
    let t = Instant::now();
    // A cache of its own, empty: the report is read, not served from memory.
    let cache = reports::ReportCache::new(Duration::ZERO);
    let report = reports::monthly_report(&pool, &cache, month, now, None).await?;
    let conservation = report
        .conservation
        .ok_or_else(|| anyhow::anyhow!("the monthly report has no conservation block"))?;
    line(
        "monthly report",
        t.elapsed(),
        floor,
        &format!("(fleet cost {})", conservation.fleet_cost),
    );
    let t = Instant::now();
    let run = billing::run_drafts(&pool, month, now, &Actor::CLI).await?;
    line(
        "invoice run",
        t.elapsed(),
        floor,
        &format!("({} drafts)", run.drafts.len()),
    );
    let t = Instant::now();
    let sums = report_store::usage_sums(
        &pool,
        month.start(),
        month.end(),
        GroupBy::Team,
        Step::Day,
        None,
    )
    .await?;
    line(
        "usage report, by team and day",
        t.elapsed(),
        floor,
        &format!("({} rows)", sums.len()),
    );
    let t = Instant::now();
    let mut stream =
        Box::pin(exports::focus(&pool, month, None, Arc::new(ExportConfig::default())).await?);
    let mut first = None;
    let mut bytes = 0usize;
    while let Some(chunk) = stream.next().await {
        first.get_or_insert_with(|| t.elapsed());
        bytes += chunk?.len();
    }
    let total = t.elapsed();
    line(
        "FOCUS export, first byte",
        first.unwrap_or(total),
        floor,
        "",
    );
    line(
        "FOCUS export, all of it",
        total,
        floor,
        &format!("({bytes} bytes)"),
    );
    Ok(())
}
