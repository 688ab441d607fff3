//! `pages`: the fleet dashboard page over a simulated month, as many bytes as it sends and as long
//! as the server takes, plain and gzip'd, with the GPU map drawn a bar per GPU (the baseline, in the
//! same run) and drawn as the server does past `gpu_map_per_gpu` GPUs (a bar per GPU model).

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, header};
use chrono::Utc;
use slicemeter::auth::store as tokens;
use slicemeter::domain::access::{Actor, Role};
use slicemeter::domain::time::Month;
use slicemeter::http::state::{AppState, ServerConfig};
use tower::ServiceExt;

use crate::common::{in_scratch_schema, load_month, percentile};

#[derive(Debug, clap::Args)]
pub struct PagesBenchArgs {
    /// The database to work in (a scratch schema is created and dropped); without one, a private
    /// PostgreSQL is started for the run.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// GPUs in the simulated fleet.
    #[arg(long, default_value_t = 1000)]
    pub gpus: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Times each page is fetched (the median is printed).
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// A size that runs in seconds (8 GPUs, the map's limit at 4): CI runs it so that the benchmark
    /// cannot rot.
    #[arg(long)]
    pub smoke: bool,
}

pub async fn pages(args: PagesBenchArgs) -> anyhow::Result<()> {
    in_scratch_schema(args.database_url.as_deref(), 8, |pool, _| run(&args, pool)).await
}

/// Bytes on the wire and the server's time (median) for one page.
struct Fetched {
    bytes: usize,
    time: Duration,
}

async fn fetch(
    router: &axum::Router,
    cookie: &str,
    uri: &str,
    gzip: bool,
    repeat: usize,
) -> anyhow::Result<Fetched> {
    let mut times = Vec::with_capacity(repeat);
    let mut bytes = 0;
    for _ in 0..repeat.max(1) {
        let mut req = Request::get(uri).header(header::COOKIE, cookie);
        if gzip {
            req = req.header(header::ACCEPT_ENCODING, "gzip");
        }
        let started = Instant::now();
        let response = router.clone().oneshot(req.body(Body::empty())?).await?;
        anyhow::ensure!(response.status() == 200, "{uri}: {}", response.status());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
        times.push(started.elapsed());
        bytes = body.len();
    }
    times.sort();
    Ok(Fetched {
        bytes,
        time: percentile(&times, 0.5),
    })
}

async fn run(args: &PagesBenchArgs, pool: sqlx::PgPool) -> anyhow::Result<()> {
    let month = Month::of(Utc::now()).minus(1);
    let (gpus, limit) = if args.smoke {
        (8, 4)
    } else {
        (args.gpus, ServerConfig::default().gpu_map_per_gpu)
    };
    load_month(&pool, gpus, args.seed, month).await?;
    let (_, token) = tokens::create(
        &pool,
        Role::Admin,
        None,
        None,
        Some("bench pages"),
        None,
        &Actor::CLI,
    )
    .await?;
    let uri = format!("/ui/fleet?month={month}");
    println!(
        "fleet page, {gpus} GPUs, {month}      plain bytes   gzip bytes   server time (median of {})",
        args.repeat
    );
    let mut rows = Vec::new();
    for (name, per_gpu) in [
        ("a bar per GPU (baseline)", usize::MAX),
        ("as served", limit),
    ] {
        let router = slicemeter::http::router(AppState::new(
            pool.clone(),
            ServerConfig {
                gpu_map_per_gpu: per_gpu,
                ..ServerConfig::default()
            },
        ));
        let signin = router
            .clone()
            .oneshot(
                Request::post("/ui/signin")
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(Body::from(format!("token={token}")))?,
            )
            .await?;
        let cookie = signin
            .headers()
            .get(header::SET_COOKIE)
            .and_then(|c| c.to_str().ok())
            .and_then(|c| c.split(';').next())
            .ok_or_else(|| anyhow::anyhow!("signing in gave no session"))?
            .to_owned();
        let plain = fetch(&router, &cookie, &uri, false, args.repeat).await?;
        let gzip = fetch(&router, &cookie, &uri, true, args.repeat).await?;
        println!(
            "{name:<34} {:>12} {:>12}   {:>8.1} ms plain, {:.1} ms gzip",
            plain.bytes,
            gzip.bytes,
            plain.time.as_secs_f64() * 1e3,
            gzip.time.as_secs_f64() * 1e3
        );
        rows.push((plain, gzip));
    }
    let (base, served) = (&rows[0].0, &rows[1].1);
    println!(
        "ratio served gzip / baseline plain    {:.3} of the bytes, {:.2}x the server time",
        served.bytes as f64 / base.bytes as f64,
        served.time.as_secs_f64() / base.time.as_secs_f64()
    );
    Ok(())
}
