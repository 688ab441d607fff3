//! `billing`: a simulated month of a fleet; the time to run every team's invoices against, in the
//! same run, one `SELECT ... GROUP BY team` over the same rollups (reading the data once); and one
//! card's ledger of the month (`GET /v1/gpus/{uuid}/ledger`'s read), by hour and by day.

use std::time::Instant;

use chrono::Utc;
use slicemeter::billing::service as billing;
use slicemeter::domain::access::Actor;
use slicemeter::domain::time::Month;
use slicemeter::reports::ledger::service::card_ledger;
use slicemeter::reports::usage::Step;

use crate::common::{group_by_floor, in_scratch_schema, load_month};

#[derive(Debug, clap::Args)]
pub struct BillingBenchArgs {
    /// The database to work in (a scratch schema is created and dropped); without one, a private PostgreSQL is started for the run.
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
}

pub async fn billing(args: BillingBenchArgs) -> anyhow::Result<()> {
    in_scratch_schema(args.database_url.as_deref(), 8, |pool, _| run(&args, pool)).await
}

async fn run(args: &BillingBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let month = Month::of(Utc::now()).minus(1);
    let gpus = if args.smoke { 8 } else { args.gpus };
    let rollup_rows = load_month(&pool, gpus, args.seed, month).await?;

    // The floor first, then the invoice run; each twice, the second timed, so both read warm caches.
    let (teams, floor_time) = group_by_floor(&pool, month).await?;
    billing::run_drafts(&pool, month, chrono::Utc::now(), &Actor::CLI).await?;
    let t = Instant::now();
    let run = billing::run_drafts(&pool, month, chrono::Utc::now(), &Actor::CLI).await?;
    let run_time = t.elapsed();
    let lines: usize = run.drafts.iter().map(|i| i.lines.len()).sum();
    anyhow::ensure!(!run.drafts.is_empty(), "the invoice run made no drafts");
    println!("rollup rows                   {rollup_rows}");
    println!(
        "invoice run (all teams)       {:>8.3} s  ({} drafts, {lines} lines)",
        run_time.as_secs_f64(),
        run.drafts.len()
    );
    println!(
        "SELECT sum() GROUP BY team    {:>8.3} s  ({teams} teams)",
        floor_time.as_secs_f64()
    );
    println!(
        "ratio run / floor             {:>8.2}",
        run_time.as_secs_f64() / floor_time.as_secs_f64()
    );
    // One card's ledger of the month, the median of five reads (the first warms the caches):
    // open, from the rollups, then issued, from its books (days: an issued month's finest step).
    let (uuid,): (String,) = sqlx::query_as("select gpu_uuid from gpu order by gpu_id limit 1")
        .fetch_one(&pool)
        .await?;
    for (step, name) in [(Step::Hour, "hour"), (Step::Day, "day")] {
        ledger(&pool, &uuid, month, step, &format!("step={name}")).await?;
    }
    let config = billing::BillingConfig {
        issue_grace: chrono::Duration::zero(),
    };
    billing::issue_period(&pool, month, Utc::now(), &config, &Actor::CLI).await?;
    ledger(&pool, &uuid, month, Step::Day, "issued, step=day").await?;
    Ok(())
}

/// Times `uuid`'s ledger of `month` at `step`, the median of five reads, and prints it as `what`.
async fn ledger(
    pool: &sqlx::PgPool,
    uuid: &str,
    month: Month,
    step: Step,
    what: &str,
) -> anyhow::Result<()> {
    let mut times = Vec::new();
    let mut steps = 0;
    let mut source = String::new();
    for _ in 0..5 {
        let t = Instant::now();
        let l = card_ledger(pool, uuid, month.start(), month.end(), step).await?;
        times.push(t.elapsed().as_secs_f64());
        steps = l.steps.len();
        source = l
            .steps
            .first()
            .map(|s| format!("{:?}", s.source))
            .unwrap_or_default();
    }
    times.sort_by(f64::total_cmp);
    println!(
        "one card's ledger, {what:<16} {:>7.3} s  ({steps} steps from {source}, median of 5)",
        times[2]
    );
    Ok(())
}
