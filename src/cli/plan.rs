//! `slicemeter plan`: the consolidation plan, as a table, JSON or a `mig-parted` file.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use rust_decimal::{Decimal, RoundingStrategy};

use super::args::{DbArgs, output};
use crate::db;
use crate::plan::recommend::TargetProfile;
use crate::plan::{self, ConsolidationPlan};

#[derive(Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Only this GPU model, as NVML names it.
    #[arg(long)]
    pub model: Option<String>,
    /// Cards reported in the last this many days are planned.
    #[arg(long, default_value_t = 14, value_parser = clap::value_parser!(u32).range(1..=90))]
    pub days: u32,
    /// Plan today's profiles as they are, without first taking each workload's recommendation.
    #[arg(long)]
    pub no_right_size: bool,
    /// The recommendations' target utilisation: default (0.7), dev (0.8), prod (0.65), ha (0.5).
    #[arg(long, default_value = "default", value_parser = parse_target)]
    pub profile: TargetProfile,
    /// What to write: a summary, the whole plan as JSON, or the `mig-parted` configuration.
    #[arg(long, value_enum, default_value_t = Format::Summary)]
    pub format: Format,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Summary,
    Json,
    MigParted,
}

pub async fn run(args: PlanArgs) -> anyhow::Result<()> {
    let pool = db::connect(&args.db.database_url, 2).await?;
    let right_size = (!args.no_right_size).then_some(args.profile);
    let plan = plan::consolidation(
        &pool,
        &plan::EvidenceCache::new(std::time::Duration::ZERO, std::time::Duration::ZERO),
        args.model.as_deref(),
        args.days,
        right_size,
        chrono::Utc::now(),
    )
    .await?;
    let text = match args.format {
        Format::Summary => summary(&plan),
        Format::Json => serde_json::to_string_pretty(&plan)? + "\n",
        Format::MigParted => plan.mig_parted.clone(),
    };
    let mut sink = output(args.out.as_ref())?;
    sink.write_all(text.as_bytes())?;
    sink.flush()?;
    Ok(())
}

fn parse_target(s: &str) -> Result<TargetProfile, String> {
    TargetProfile::parse(s).ok_or_else(|| format!("{s:?} is not one of default, dev, prod, ha"))
}

/// An amount to the cent, half to even, always with two places (`0.00`, not `0`).
fn cents(d: Decimal) -> Decimal {
    let mut d = d.round_dp_with_strategy(2, RoundingStrategy::MidpointNearestEven);
    d.rescale(2);
    d
}

fn summary(plan: &ConsolidationPlan) -> String {
    let currency = plan.currency.as_deref().unwrap_or("");
    let mut out = format!(
        "Consolidation plan from the last {} days (advice: nothing is reconfigured)\n",
        plan.days
    );
    for m in &plan.models {
        out += &format!(
            "{}: {} cards today, {} planned ({}), {} of {} instances given back, {} move, {} freed, {} {currency}/month\n",
            m.model,
            m.cards_today,
            m.cards_planned,
            if m.optimal {
                "proven the fewest"
            } else {
                "not proven the fewest"
            },
            m.instances_released,
            m.instances,
            m.instances_moved,
            m.freed.len(),
            cents(m.monthly_saving),
        );
        let number = |d: Decimal, places: u32| {
            d.round_dp_with_strategy(places, RoundingStrategy::MidpointNearestEven)
                .to_string()
        };
        let money = |d: Decimal| format!("{d} {currency}");
        out += &format!(
            "  stranded (no profile fits): today {}; planned {}\n",
            m.stranded_today.describe(number, money),
            m.stranded_planned.describe(number, money),
        );
        for mv in &m.moves {
            let place = if mv.from_gpu == mv.to_gpu {
                format!("on {}", mv.to_gpu)
            } else {
                format!("{} -> {}", mv.from_gpu, mv.to_gpu)
            };
            out += &format!(
                "  {:>4}. {:<7} {} ({}) {place}\n",
                mv.order, mv.action, mv.slice_uuid, mv.profile
            );
        }
    }
    out += &format!(
        "Saving: {} {currency} a month\n",
        cents(plan.monthly_saving)
    );
    out
}
