//! `scale`: first a month of a simulated fleet posted through HTTP (`fill`: windows per second day
//! by day, peak memory of simulator and server); then a month of a large fleet written straight
//! into the rollups with SQL (as fast as the schema takes it, no ingest), and the month read as finance and the dashboard read it: the
//! monthly report, the invoice run, the usage report by day and the FOCUS export (first byte and
//! total), the fleet and a team's page, a crowd of clients on the report over HTTP, and the report
//! once the month is issued (read from its books), each against one `GROUP BY` over the same
//! rollups in the same run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use slicemeter::billing::service as billing;
use slicemeter::db;
use slicemeter::domain::access::Actor;
use slicemeter::domain::time::Month;
use slicemeter::plan;
use slicemeter::reports::service as reports;
use slicemeter::reports::store as report_store;
use slicemeter::reports::usage::{Dimension, GroupBy, Step};

use slicemeter::http::state::ServerConfig;

use crate::fill;

mod focus;
mod kept;
mod runs;
mod split;

use crate::common::{
    Loopback, admin_token, group_by_floor, in_scratch_schema, percentile, publish_example_card,
};

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
    /// Clients asking for the monthly report at once, over HTTP.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// How long they keep asking.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub load_for: Duration,
    /// A size that runs in seconds (16 GPUs, 2 days, 2 s of load): CI runs it so that the
    /// benchmark cannot rot.
    #[arg(long)]
    pub smoke: bool,
    /// Skip the first part: the month posted through HTTP by the simulator (at 10,000 GPUs, tens
    /// of minutes).
    #[arg(long)]
    pub no_post: bool,
    /// Batches in flight at once while posting.
    #[arg(long, default_value_t = 8)]
    pub post_concurrency: usize,
    /// GPUs a chunk of the posted month: the chunks are posted one after another, each timed
    /// (8 in a smoke run).
    #[arg(long, default_value_t = 2_000)]
    pub post_chunk: usize,
    /// Only the pages as served, over the month a run kept (`SLICEMETER_BENCH_KEEP=1`) in this
    /// schema, migrated first: a build's pages against another's on the same rows.
    #[arg(long)]
    pub pages_of_schema: Option<String>,
}

pub async fn scale(args: ScaleBenchArgs) -> anyhow::Result<()> {
    let month = Month::of(Utc::now()).minus(1);
    let (gpus, days) = if args.smoke {
        (16, 2)
    } else {
        (args.gpus, args.days)
    };
    if let Some(schema) = &args.pages_of_schema {
        let (pool, floor) = kept::open(args.database_url.as_deref(), schema, month, line).await?;
        return served(&pool, month, floor, args.clients, args.load_for).await;
    }
    if !args.no_post {
        let chunk = if args.smoke { 8 } else { args.post_chunk };
        in_scratch_schema(args.database_url.as_deref(), 16, |pool, _| async move {
            fill::fill(&pool, gpus, days, month, args.post_concurrency, chunk).await
        })
        .await?;
    }
    in_scratch_schema(args.database_url.as_deref(), 16, |pool, _| run(&args, pool)).await
}

/// Writes `gpus` GPUs of seven 1g.10gb slices each, one consumer per slice over eight teams, and
/// `days` of hourly, daily and team-day rollups (each slice held four hours in five) and presence.
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
        "insert into namespace_owner (namespace, effective_from, team_id)
         select 'ns-' || t, '2000-01-01Z', 'team-' || t from generate_series(1, 8) t",
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
        "insert into consumer (fingerprint, namespace, pod, container)
         select sha256(convert_to(s.slice_uuid, 'UTF8')), 'ns-' || (1 + s.slice_id % 8),
                s.slice_uuid, 'main'
         from slice s",
        "insert into usage_hourly
         select h, s.slice_id, c.consumer_id, 3600, 3600 * 5e9, 5000000000, 1800, 3600, 1, s.gpu_id,
                'team-' || (1 + s.slice_id % 8)
         from slice s join consumer c on c.pod = s.slice_uuid,
              generate_series($1, $2 - interval '1 hour', interval '1 hour') h
         where (s.slice_id + extract(hour from h at time zone 'UTC')::int) % 5 <> 0",
        "insert into usage_daily
         select date_trunc('day', hour, 'UTC'), slice_id, consumer_id, sum(held_seconds),
                sum(memory_byte_seconds), max(memory_peak_bytes), sum(compute_active_seconds),
                sum(compute_known_seconds), sum(window_count), gpu_id, team_id
         from usage_hourly group by 1, 2, 3, gpu_id, team_id",
        "select fill_team_day_rollups()",
        // Seven 1g.10gb instances leave the eighth memory slice, which no profile can take.
        "insert into gpu_hourly (hour, gpu_id, present_seconds, stranded_memory_slice_seconds)
         select h, g.gpu_id, 3600, 3600
         from gpu g, generate_series($1, $2 - interval '1 hour', interval '1 hour') h",
        "insert into gpu_daily (day, gpu_id, present_seconds, stranded_memory_slice_seconds)
         select date_trunc('day', hour, 'UTC'), gpu_id, sum(present_seconds),
                sum(stranded_memory_slice_seconds)
         from gpu_hourly group by 1, 2",
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

// long: the benchmark's steps in the order its report prints them, on one loaded month
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
    let cache = Arc::new(reports::ReportCache::new(Duration::ZERO));
    let report = reports::monthly_report(&pool, &cache, month, now, None).await?;
    let conservation = report
        .conservation
        .ok_or_else(|| anyhow::anyhow!("the monthly report has no conservation block"))?;
    line(
        "monthly report",
        t.elapsed(),
        floor,
        &format!(
            "(fleet cost {}, stranded {})",
            conservation.fleet_cost, conservation.stranded
        ),
    );
    let report_time = t.elapsed();
    let t = Instant::now();
    let run = billing::run_drafts(&pool, month, now, &Actor::CLI).await?;
    let run_time = t.elapsed();
    line(
        "invoice run, no month rollup yet",
        run_time,
        floor,
        &format!("({} drafts)", run.drafts.len()),
    );
    split::split_part(&pool, month, floor, report_time, run_time, line).await?;
    let t = Instant::now();
    let sums = report_store::usage_sums(
        &pool,
        month.start(),
        month.end(),
        &GroupBy::of(vec![Dimension::Team]),
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
    let by_workload = reports::usage_report(
        &pool,
        &cache,
        month.start(),
        month.end(),
        &GroupBy::of(vec![
            Dimension::Team,
            Dimension::Namespace,
            Dimension::Workload,
        ]),
        Step::Month,
        None,
    )
    .await?;
    line(
        "usage report, by team, namespace and workload, priced",
        t.elapsed(),
        floor,
        &format!("({} rows)", by_workload.rows.len()),
    );
    focus::export(&pool, &cache, month, floor, line).await?;
    let load_for = if args.smoke {
        Duration::from_secs(2)
    } else {
        args.load_for
    };
    // Right-sizing reads closed days from their summaries, which serve's background step makes
    // a few days a round; the month written here with SQL is summarised at once, as it would have
    // been by the time its days were read.
    let t = Instant::now();
    let mut summarised = 0;
    let mut day = month.start();
    while day < (month.start() + chrono::Duration::days(i64::from(days))).min(month.end()) {
        anyhow::ensure!(
            plan::days::summarise_day(&pool, day).await?,
            "the summary of {day} was refused: a write holds the day"
        );
        summarised += 1;
        day += chrono::Duration::days(1);
    }
    line(
        "right-sizing's day summaries",
        t.elapsed(),
        floor,
        &format!("({summarised} days)"),
    );
    kept::windows(&pool, floor, line).await?;
    // As when the month has ended and serve's background step has built its rollup.
    runs::from_rollup(&pool, month, &run, floor, line).await?;
    served(&pool, month, floor, args.clients, load_for).await?;

    // Last, as it freezes the month: issued, the month is priced from its books.
    let config = billing::BillingConfig {
        issue_grace: chrono::Duration::zero(),
    };
    let issued = billing::issue_period(&pool, month, Utc::now(), &config, &Actor::CLI).await?;
    let t = Instant::now();
    let cache = Arc::new(reports::ReportCache::new(Duration::ZERO));
    let report = reports::monthly_report(&pool, &cache, month, Utc::now(), None).await?;
    anyhow::ensure!(
        report.conservation.map(|c| c.fleet_cost) == Some(conservation.fleet_cost),
        "the issued month's report does not add up to the open month's"
    );
    line(
        "monthly report, issued (its books)",
        t.elapsed(),
        floor,
        &format!("({} invoices issued)", issued.len()),
    );
    // The dashboards' cost over time: a month of it, issued, priced, read anew.
    let t = Instant::now();
    let cache = Arc::new(reports::ReportCache::new(Duration::ZERO));
    let by_team = reports::usage_report(
        &pool,
        &cache,
        month.start(),
        month.end(),
        &GroupBy::of(vec![Dimension::Team]),
        Step::Month,
        None,
    )
    .await?;
    line(
        "usage report by team and month, issued, priced",
        t.elapsed(),
        floor,
        &format!("({} rows)", by_team.rows.len()),
    );
    Ok(())
}

/// What one GET gave.
struct Got {
    status: u16,
    bytes: usize,
    time: Duration,
    /// A team page that came without right-sizing's evidence, which it says is being read.
    evidence_pending: bool,
}

async fn get(client: &reqwest::Client, url: &str, auth: &Auth<'_>) -> anyhow::Result<Got> {
    let t = Instant::now();
    let request = match auth {
        Auth::Bearer(token) => client.get(url).bearer_auth(token),
        Auth::Cookie(cookie) => client.get(url).header("cookie", *cookie),
    };
    let response = request.header("accept-encoding", "gzip").send().await?;
    let status = response.status().as_u16();
    let gzip = response
        .headers()
        .get("content-encoding")
        .is_some_and(|e| e == "gzip");
    let body = response.bytes().await?;
    let time = t.elapsed();
    let mut text = Vec::new();
    if gzip {
        use std::io::Read;
        flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut text)?;
    } else {
        text.extend_from_slice(&body);
    }
    let marker: &[u8] = br#"data-field="right-sizing-pending""#;
    Ok(Got {
        status,
        bytes: body.len(),
        time,
        evidence_pending: text.windows(marker.len()).any(|w| w == marker),
    })
}

enum Auth<'a> {
    Bearer(&'a str),
    Cookie(&'a str),
}

/// The month as the server serves it on loopback: the monthly report, the fleet page and a team's
/// page, each read once (nothing kept) and again (kept while the database is unchanged), then
/// `clients` clients asking for the report back to back for `load_for`, then each page once more
/// after a write (as under steady ingest).
async fn served(
    pool: &sqlx::PgPool,
    month: Month,
    floor: Duration,
    clients: usize,
    load_for: Duration,
) -> anyhow::Result<()> {
    // The partitions the server creates ahead as it starts, created first: a write while the
    // passes below run would have them read the database anew.
    let this = Month::of(Utc::now());
    let ahead = [
        this.first_day(),
        this.next().first_day(),
        this.next().next().first_day(),
    ];
    db::Partitions::default().ensure(pool, &ahead).await?;
    let server = Loopback::start(pool, ServerConfig::default()).await?;
    let base = server.base.clone();
    let token = admin_token(pool).await?;
    // No gzip decoding in the client: the bytes counted are the bytes sent.
    let client = reqwest::Client::builder()
        .no_gzip()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let signin = client
        .post(format!("{base}/ui/signin"))
        .form(&[("token", token.as_str())])
        .send()
        .await?;
    let cookie = signin
        .headers()
        .get("set-cookie")
        .and_then(|c| c.to_str().ok())
        .and_then(|c| c.split(';').next())
        .ok_or_else(|| anyhow::anyhow!("signing in gave no session"))?
        .to_owned();
    let report = format!("{base}/v1/reports/monthly/{month}");
    let pages = [
        (
            "monthly report over HTTP",
            report.clone(),
            Auth::Bearer(&token),
        ),
        (
            "fleet page",
            format!("{base}/ui/fleet?month={month}"),
            Auth::Cookie(&cookie),
        ),
        (
            "team page",
            format!("{base}/ui/team/team-1?month={month}"),
            Auth::Cookie(&cookie),
        ),
    ];
    let fetch = |what: &str, pass: &str, got: Got| -> anyhow::Result<()> {
        anyhow::ensure!(got.status == 200, "{what}: {}", got.status);
        line(
            &format!("{what}, {pass}"),
            got.time,
            floor,
            &format!("({} bytes gzip)", got.bytes),
        );
        Ok(())
    };
    for (what, url, auth) in &pages {
        let asked = Instant::now();
        let got = get(&client, url, auth).await?;
        let mut pending = got.evidence_pending;
        fetch(
            what,
            if pending {
                "read, evidence pending"
            } else {
                "read"
            },
            got,
        )?;
        // A page that came without right-sizing's evidence (`serve --evidence-wait`): asked
        // again until it comes with it, the time from the first request.
        while pending {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let got = get(&client, url, auth).await?;
            pending = got.evidence_pending;
            if !pending {
                fetch(
                    what,
                    "evidence in",
                    Got {
                        time: asked.elapsed(),
                        ..got
                    },
                )?;
            }
        }
        fetch(what, "kept", get(&client, url, auth).await?)?;
    }

    // One client alone for a second: the goodput the crowd is measured against.
    let alone = crowd(&client, &report, &token, 1, Duration::from_secs(1)).await?;
    let many = crowd(&client, &report, &token, clients, load_for).await?;
    // What a request finds under steady ingest: the database changed since the kept read (last,
    // since right-sizing's evidence is then read anew behind the request, taking the machine).
    for (what, url, auth) in &pages {
        sqlx::query("update team set display_name = display_name where team_id = 'team-1'")
            .execute(pool)
            .await?;
        fetch(what, "after a write", get(&client, url, auth).await?)?;
    }
    server.stop().await?;
    for (who, c) in [
        ("1 client", &alone),
        (&*format!("{clients} clients"), &many),
    ] {
        println!(
            "monthly report, {who:<11} {:>7} requests in {:.1} s: {:>8.1}/s, p50 {:.1} ms, p99 {:.1} ms, 5xx {}, other errors {}",
            c.latencies.len(),
            c.elapsed.as_secs_f64(),
            c.ok as f64 / c.elapsed.as_secs_f64(),
            percentile(&c.latencies, 0.50).as_secs_f64() * 1e3,
            percentile(&c.latencies, 0.99).as_secs_f64() * 1e3,
            c.server_errors,
            c.other_errors
        );
    }
    println!(
        "ratio goodput {clients} clients / 1 client {:.2}",
        (many.ok as f64 / many.elapsed.as_secs_f64())
            / (alone.ok as f64 / alone.elapsed.as_secs_f64())
    );
    Ok(())
}

struct Crowd {
    latencies: Vec<Duration>,
    ok: usize,
    server_errors: usize,
    other_errors: usize,
    elapsed: Duration,
}

/// `clients` clients asking for `url` back to back for `duration`.
async fn crowd(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Crowd> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients.max(1))
        .map(|_| {
            let (client, url, token) = (client.clone(), url.to_owned(), token.to_owned());
            tokio::spawn(async move {
                let mut got = Vec::new();
                while started.elapsed() < duration {
                    got.push(get(&client, &url, &Auth::Bearer(&token)).await);
                }
                got
            })
        })
        .collect();
    let mut c = Crowd {
        latencies: Vec::new(),
        ok: 0,
        server_errors: 0,
        other_errors: 0,
        elapsed: Duration::ZERO,
    };
    for task in tasks {
        for got in task.await? {
            match got {
                Ok(g) => {
                    c.latencies.push(g.time);
                    match g.status {
                        200 => c.ok += 1,
                        500..=599 => c.server_errors += 1,
                        _ => c.other_errors += 1,
                    }
                }
                Err(_) => c.other_errors += 1,
            }
        }
    }
    c.elapsed = started.elapsed();
    c.latencies.sort();
    Ok(c)
}
