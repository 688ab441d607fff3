//! `slicemeter-bench plan`: right-sizing and the consolidation plan over a fleet of MIG H100s with
//! `--days` of hourly rollups written straight with SQL, each step's time against one scan of the
//! same rows in the same run, and the process's peak memory while it plans.
//!
//! Each card holds one of four valid layouts: 3g.40gb (an oversized service: 6 GiB, 3 % busy) +
//! 2g.20gb + 2 x 1g.10gb; 4g.40gb + 3g.40gb, both busy; three 1g.10gb, one never busy; two
//! 2g.20gb, one never busy. Right-sizing shrinks the first kind's 3g and gives back the idle ones,
//! and the plan packs what is left. Right-sizing's evidence is read for the fleet and for one team
//! from the hourly rollups alone, then every closed day is summarised (`plan::days`) and the same
//! read from the summaries, checked equal.

use std::time::{Duration, Instant};

use chrono::Utc;
use slicemeter::db;
use slicemeter::domain::team::TeamId;
use slicemeter::domain::time::{Month, floor_hour};
use slicemeter::plan::store::{self, Source};
use slicemeter::plan::{self, recommend::TargetProfile};

use crate::common::{in_scratch_schema, publish_example_card};

#[derive(Debug, clap::Args)]
pub struct PlanBenchArgs {
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    #[arg(long, default_value_t = 1_000)]
    pub gpus: usize,
    #[arg(long, default_value_t = 14)]
    pub days: u32,
    /// A size that runs in seconds (16 GPUs, 7 days): CI runs it so that the benchmark cannot rot.
    #[arg(long)]
    pub smoke: bool,
}

pub async fn plan(args: PlanBenchArgs) -> anyhow::Result<()> {
    in_scratch_schema(args.database_url.as_deref(), 4, |pool, _| run(&args, pool)).await
}

// long: the benchmark's lines in the order they print, each read against the floor of the same run
async fn run(args: &PlanBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let (gpus, days) = if args.smoke {
        (16, 7)
    } else {
        (args.gpus, args.days)
    };
    let now = Utc::now();
    let to = floor_hour(now);
    let from = to - chrono::Duration::days(i64::from(days));
    let t = Instant::now();
    let rows = write_fleet(&pool, gpus, from, to).await?;
    publish_example_card(&pool, Month::of(from)).await?;
    eprintln!(
        "wrote {gpus} GPUs x {days} days: {rows} hourly rollup rows in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // The floor: one pass over the same rows.
    let t = Instant::now();
    let scanned: (i64, Option<rust_decimal::Decimal>) = sqlx::query_as(
        "select count(*), sum(held_seconds) from usage_hourly where hour >= $1 and hour < $2",
    )
    .bind(from)
    .bind(to)
    .fetch_one(&pool)
    .await?;
    let floor = t.elapsed();
    line(
        "SELECT count(), sum() of the rows",
        floor,
        floor,
        "(the floor)",
    );

    // Right-sizing's evidence, for the fleet and for one team, from the hourly rollups alone;
    // then every closed day summarised, and the same from the summaries (and the hours left).
    let range = [plan::right_sizing_range(days, now)];
    let mut hourly = Vec::new();
    let team_1 = TeamId::parse("team-1")?;
    for (what, team) in [("fleet", None), ("one team", Some(&team_1))] {
        let t = Instant::now();
        let read = store::evidence_from(&pool, &range, team, Source::HourlyOnly).await?;
        line(
            &format!("evidence, {what}, hourly rollups"),
            t.elapsed(),
            floor,
            &format!("({} groups)", read[0].len()),
        );
        hourly.push(read);
    }
    let t = Instant::now();
    let round = plan::days::summarise_due(&pool, now, 10_000).await?;
    let took = t.elapsed();
    let slowest = round
        .summarised
        .iter()
        .map(|d| d.1)
        .max()
        .unwrap_or_default();
    line(
        "summarise the closed days",
        took,
        floor,
        &format!(
            "({} days, {:.3} s a day, the slowest {:.3} s; {} rows)",
            round.summarised.len(),
            took.as_secs_f64() / round.summarised.len().max(1) as f64,
            slowest.as_secs_f64(),
            sqlx::query_scalar::<_, i64>("select count(*) from evidence_day")
                .fetch_one(&pool)
                .await?
        ),
    );
    evidence_equal(&pool, &range, &team_1, &hourly, Source::Days, "days", floor).await?;
    let t = Instant::now();
    let built = plan::days::build_due_windows(&pool, now).await?;
    line(
        "build the windows of days",
        t.elapsed(),
        floor,
        &format!("({})", windows_built(&built)),
    );
    evidence_equal(
        &pool,
        &range,
        &team_1,
        &hourly,
        Source::Summaries,
        "windows",
        floor,
    )
    .await?;

    let t = Instant::now();
    let recs = plan::recommendations(
        &pool,
        &plan::EvidenceCache::new(Duration::ZERO, Duration::ZERO),
        None,
        days,
        TargetProfile::Default,
        now,
    )
    .await?;
    line(
        "recommendations",
        t.elapsed(),
        floor,
        &format!("({} workloads of {} rows)", recs.len(), scanned.0),
    );
    // What `GET /v1/recommendations?team=team-1` reads and prices.
    let t = Instant::now();
    let team_recs = plan::recommendations(
        &pool,
        &plan::EvidenceCache::new(Duration::ZERO, Duration::ZERO),
        Some(&team_1),
        days,
        TargetProfile::Default,
        now,
    )
    .await?;
    line(
        "recommendations, one team",
        t.elapsed(),
        floor,
        &format!("({} workloads)", team_recs.len()),
    );
    for (what, right_size) in [
        ("plan, today's profiles", None),
        ("plan, right-sized first", Some(TargetProfile::Default)),
    ] {
        reset_peak_rss();
        let before = peak_rss_kib();
        let t = Instant::now();
        let p = plan::consolidation(
            &pool,
            // A cache of its own: each plan reads its evidence, not the one before's.
            &plan::EvidenceCache::new(Duration::ZERO, Duration::ZERO),
            None,
            days,
            right_size,
            now,
        )
        .await?;
        let took = t.elapsed();
        let m = p
            .models
            .first()
            .ok_or_else(|| anyhow::anyhow!("the plan has no model"))?;
        anyhow::ensure!(
            m.cards_today == gpus,
            "{} cards planned of {gpus}",
            m.cards_today
        );
        line(
            what,
            took,
            floor,
            &format!(
                "({} -> {} cards, {}, {} released, {} moved, {} {}/month; peak RSS {} MiB, {} MiB before)",
                m.cards_today,
                m.cards_planned,
                if m.optimal {
                    "proven optimal"
                } else {
                    "not proven optimal"
                },
                m.instances_released,
                m.instances_moved,
                p.monthly_saving.round_dp(2),
                p.currency.as_deref().unwrap_or(""),
                peak_rss_kib().unwrap_or(0) / 1024,
                before.unwrap_or(0) / 1024,
            ),
        );
    }
    Ok(())
}

/// The fleet of the module's doc, `from..to` of hourly rollups.
async fn write_fleet(
    pool: &sqlx::PgPool,
    gpus: usize,
    from: chrono::DateTime<Utc>,
    to: chrono::DateTime<Utc>,
) -> anyhow::Result<i64> {
    let mut months = vec![Month::of(from).first_day()];
    let mut m = Month::of(from);
    while m.end() < to {
        m = m.next();
        months.push(m.first_day());
    }
    db::Partitions::default().ensure(pool, &months).await?;
    // (layout, slot, profile, profile id, compute slices, memory slices, GiB, role)
    let statements = [
        "create table layout (layout int, slot int, profile text, profile_id int,
                                        c int, m int, bytes int8, role text)",
        "insert into layout values
            (0, 0, '3g.40gb', 9, 3, 4, 42412802048, 'oversized'),
            (0, 1, '2g.20gb', 14, 2, 2, 21206401024, 'busy'),
            (0, 2, '1g.10gb', 19, 1, 1, 10468982784, 'busy'),
            (0, 3, '1g.10gb', 19, 1, 1, 10468982784, 'busy'),
            (1, 0, '4g.40gb', 5, 4, 4, 42412802048, 'busy'),
            (1, 1, '3g.40gb', 9, 3, 4, 42412802048, 'busy'),
            (2, 0, '1g.10gb', 19, 1, 1, 10468982784, 'busy'),
            (2, 1, '1g.10gb', 19, 1, 1, 10468982784, 'busy'),
            (2, 2, '1g.10gb', 19, 1, 1, 10468982784, 'idle'),
            (3, 0, '2g.20gb', 14, 2, 2, 21206401024, 'busy'),
            (3, 1, '2g.20gb', 14, 2, 2, 21206401024, 'idle')",
        "insert into team (team_id, display_name) select 'team-' || t, 'Team ' || t
         from generate_series(1, 8) t",
        "insert into gpu (gpu_uuid, node, model, memory_bytes, compute_slices, memory_slices, mig_enabled)
         select 'GPU-plan-' || g, 'node-' || (g / 8), 'NVIDIA H100 80GB HBM3', 85520809984, 7, 8, true
         from generate_series(0, $1::int8 - 1) g",
        "insert into slice (slice_uuid, gpu_id, kind, profile, profile_id, compute_slices,
                            memory_slices, memory_bytes, compute_share, memory_share,
                            memory_reserved_bytes, reserved)
         select 'MIG-plan-' || g.gpu_id || '-' || l.slot, g.gpu_id, 'mig', l.profile, l.profile_id,
                l.c, l.m, l.bytes, l.c / 7.0, l.m / 8.0, l.bytes, true
         from gpu g join layout l on l.layout = g.gpu_id % 4",
        "insert into consumer (fingerprint, namespace, pod, container)
         select sha256(convert_to(s.slice_uuid, 'UTF8')), 'ns-' || (1 + s.slice_id % 8),
                'w-' || s.slice_id, 'main'
         from slice s",
        "insert into usage_hourly
         select h, s.slice_id, c.consumer_id, 3600,
                3600 * p.peak * 0.8, p.peak, 3600 * p.busy, 3600, 60, s.gpu_id,
                'team-' || (1 + s.slice_id % 8)
         from slice s
         join gpu g using (gpu_id)
         join layout l on l.layout = g.gpu_id % 4 and s.slice_uuid = 'MIG-plan-' || g.gpu_id || '-' || l.slot
         join consumer c on c.pod = 'w-' || s.slice_id
         cross join lateral (select case l.role when 'oversized' then 6442450944
                                               when 'idle' then 1073741824
                                               else (l.bytes * 0.7)::int8 end as peak,
                                    case l.role when 'oversized' then 0.03
                                               when 'idle' then 0 else 0.8 end as busy) p,
              generate_series($1, $2 - interval '1 hour', interval '1 hour') h",
        "insert into usage_daily (day, slice_id, consumer_id, held_seconds, memory_byte_seconds,
                                  memory_peak_bytes, compute_active_seconds, compute_known_seconds,
                                  window_count, gpu_id, team_id)
         select date_trunc('day', hour, 'UTC'), slice_id, consumer_id, sum(held_seconds),
                sum(memory_byte_seconds), max(memory_peak_bytes), sum(compute_active_seconds),
                sum(compute_known_seconds), sum(window_count), gpu_id, team_id
         from usage_hourly where hour >= $1 and hour < $2
         group by 1, slice_id, consumer_id, gpu_id, team_id",
        "insert into gpu_hourly
         select h, g.gpu_id, 3600
         from gpu g, generate_series($1, $2 - interval '1 hour', interval '1 hour') h",
        "analyze",
    ];
    for sql in statements {
        let mut q = sqlx::query(sql);
        if sql.contains("$2") {
            q = q.bind(from).bind(to);
        } else if sql.contains("$1") {
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
        "{what:<34} {:>8.3} s  {:>7.2}x the floor  {detail}",
        time.as_secs_f64(),
        time.as_secs_f64() / floor.as_secs_f64().max(1e-9)
    );
}

/// Resets this process's peak resident memory (Linux: `clear_refs` 5), so that the next
/// reading is the peak of what follows.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_rss_kib() -> Option<u64> {
    crate::common::peak_rss_kib(std::process::id())
}

/// Right-sizing's evidence of the fleet and of `team` over `range` from `source`, timed, and
/// checked equal, every field, to `hourly` (the same from the hourly rollups alone).
async fn evidence_equal(
    pool: &sqlx::PgPool,
    range: &[(chrono::DateTime<Utc>, chrono::DateTime<Utc>)],
    team: &TeamId,
    hourly: &[Vec<Vec<store::Evidence>>],
    source: Source,
    name: &str,
    floor: Duration,
) -> anyhow::Result<()> {
    for ((what, team), hourly) in [("fleet", None), ("one team", Some(team))]
        .into_iter()
        .zip(hourly)
    {
        let t = Instant::now();
        let read = store::evidence_from(pool, range, team, source).await?;
        line(
            &format!("evidence, {what}, {name}"),
            t.elapsed(),
            floor,
            &format!("({} groups, equal to the hourly read)", read[0].len()),
        );
        anyhow::ensure!(
            format!("{read:?}") == format!("{hourly:?}"),
            "the {what}'s evidence from the {name} differs from the hourly rollups'"
        );
    }
    Ok(())
}

type DayRange = (chrono::DateTime<Utc>, chrono::DateTime<Utc>);

/// What a round of building windows did, in words.
pub fn windows_built(built: &[(DayRange, plan::days::Window)]) -> String {
    built
        .iter()
        .map(|((a, b), w)| {
            let (a, b) = (a.date_naive(), b.date_naive());
            match w {
                plan::days::Window::Built(rows) => format!("{a} to {b}: {rows} rows"),
                plan::days::Window::UpToDate => format!("{a} to {b}: up to date"),
                plan::days::Window::NotReady => format!("{a} to {b}: days not summarised"),
                plan::days::Window::Busy => format!("{a} to {b}: another builder's"),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}
