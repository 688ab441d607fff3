//! Test support: every test gets a fresh database (a copy of a migrated template) on a real
//! PostgreSQL, the real router called in-process, and typed helpers. PostgreSQL is the one at
//! `DATABASE_URL`, or, when that is unset, a private cluster started the way `demo` starts one.

use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use slicemeter::db;
use slicemeter::db::cluster::PrivateCluster;
use slicemeter::domain::access::Role;
use slicemeter::domain::team::TeamId;
use slicemeter::http::{
    self,
    state::{AppState, ServerConfig},
};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tower::ServiceExt;

/// URL of a database on the test server (any database: it is used to create others).
fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("DATABASE_URL") {
            return url;
        }
        let root = if nix::unistd::Uid::effective().is_root() {
            PrivateCluster::default_root("test")
        } else {
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pg")
        };
        let cluster = PrivateCluster::start(&root).expect("a private PostgreSQL for the tests");
        let url = cluster.url("postgres");
        // Stopped when the test process exits.
        static CLUSTER: OnceLock<PrivateCluster> = OnceLock::new();
        CLUSTER.set(cluster).expect("set once");
        extern "C" fn stop() {
            if let Some(c) = CLUSTER.get() {
                let _ = c.stop();
            }
        }
        unsafe extern "C" {
            fn atexit(f: extern "C" fn()) -> i32;
        }
        // SAFETY: registering a plain function to run at exit.
        unsafe { atexit(stop) };
        url
    })
}

fn options_for(db: &str) -> PgConnectOptions {
    PgConnectOptions::from_str(server_url())
        .expect("a valid DATABASE_URL")
        .database(db)
}

/// A migrated template, made once per test process; test databases are copies of it.
async fn template() -> &'static str {
    static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    TEMPLATE
        .get_or_init(|| async {
            // Named after every migration's checksum and every SQL function's file (applied after
            // the migrations), so a changed or added migration or function makes a new one.
            let digest = db::MIGRATOR
                .iter()
                .flat_map(|m| m.checksum.iter())
                .chain(db::FUNCTIONS.iter().flat_map(|(_, sql)| sql.as_bytes()))
                .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
                });
            let digest = format!("{digest:016x}");
            let name = format!("sm_tpl_{digest}");
            let mut admin = PgConnection::connect_with(&options_for("postgres"))
                .await
                .expect("connecting to the test PostgreSQL");
            sqlx::query("select pg_advisory_lock(4711)")
                .execute(&mut admin)
                .await
                .unwrap();
            drop_stale_databases(&mut admin).await;
            let exists: bool =
                sqlx::query_scalar("select exists(select 1 from pg_database where datname = $1)")
                    .bind(&name)
                    .fetch_one(&mut admin)
                    .await
                    .unwrap();
            if !exists {
                let building = format!("{name}_building");
                sqlx::query(&format!("drop database if exists {building}"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                sqlx::query(&format!("create database {building}"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                let pool = db::connect_with(options_for(&building), 2).await.unwrap();
                db::migrate(&pool).await.expect("migrations apply");
                pool.close().await;
                // Closed connections may linger a moment at the server; none may be left to rename.
                sqlx::query(
                    "select pg_terminate_backend(pid) from pg_stat_activity where datname = $1",
                )
                .bind(&building)
                .execute(&mut admin)
                .await
                .unwrap();
                sqlx::query(&format!("alter database {building} rename to {name}"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
            }
            sqlx::query("select pg_advisory_unlock(4711)")
                .execute(&mut admin)
                .await
                .unwrap();
            name
        })
        .await
}

/// Drops test databases left by test processes that are gone.
async fn drop_stale_databases(admin: &mut PgConnection) {
    let names: Vec<String> =
        sqlx::query_scalar("select datname from pg_database where datname like 'sm_t\\_%'")
            .fetch_all(&mut *admin)
            .await
            .unwrap();
    for name in names {
        let pid = name.split('_').nth(2).and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
            let _ = sqlx::query(&format!("drop database if exists {name} with (force)"))
                .execute(&mut *admin)
                .await;
        }
    }
}

/// A fresh database with nothing in it, not even the migrations (for testing an upgrade).
pub async fn empty_pool() -> PgPool {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "sm_t_{}_empty_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = PgConnection::connect_with(&options_for("postgres"))
        .await
        .unwrap();
    sqlx::query(&format!("create database {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    db::connect_with(options_for(&name), 2).await.unwrap()
}

/// A fresh, migrated database of its own, and its URL.
pub async fn fresh_pool() -> (PgPool, String) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let template = template().await;
    let name = format!(
        "sm_t_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = PgConnection::connect_with(&options_for("postgres"))
        .await
        .unwrap();
    sqlx::query(&format!("create database {name} template {template}"))
        .execute(&mut admin)
        .await
        .expect("copying the template database");
    let mut url = url::Url::parse(server_url()).expect("DATABASE_URL is a URL");
    url.set_path(&name);
    (
        db::connect_with(options_for(&name), 8).await.unwrap(),
        url.to_string(),
    )
}

/// The server's defaults, but keeping raw windows forever: the tests' months are fixed dates in
/// 2026, which the default retention (13 months) would refuse once they are that old.
pub fn test_config() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.ingest.keep_raw_months = None;
    config
}

pub struct TestApp {
    pub pool: PgPool,
    pub router: Router,
    pub admin: String,
    /// The URL of this test's database (it may hold a password: never print it).
    pub database_url: String,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Value,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.body)
    }
}

impl TestApp {
    /// The app as [`test_config`] configures it, but without ingest rate limits: tests post
    /// quickly.
    pub async fn spawn() -> TestApp {
        Self::with_config(ServerConfig {
            ingest_rate: 0.0,
            ..test_config()
        })
        .await
    }

    pub async fn with_config(config: ServerConfig) -> TestApp {
        let (pool, database_url) = fresh_pool().await;
        let router = http::router(AppState::new(pool.clone(), config));
        let (_, admin) = slicemeter::auth::store::create(
            &pool,
            Role::Admin,
            None,
            None,
            Some("test admin"),
            None,
            &slicemeter::domain::access::Actor::CLI,
        )
        .await
        .unwrap();
        TestApp {
            pool,
            router,
            admin,
            database_url,
        }
    }

    pub async fn token(&self, role: Role, team: Option<&str>, node: Option<&str>) -> String {
        if let Some(t) = team {
            // The team must exist; an existing one keeps its namespaces.
            sqlx::query(
                "insert into team (team_id, display_name) values ($1, $1) on conflict do nothing",
            )
            .bind(t)
            .execute(&self.pool)
            .await
            .unwrap();
        }
        let team = team.map(|t| TeamId::parse(t).unwrap());
        slicemeter::auth::store::create(
            &self.pool,
            role,
            team.as_ref(),
            node,
            None,
            None,
            &slicemeter::domain::access::Actor::CLI,
        )
        .await
        .unwrap()
        .1
    }

    pub async fn request(&self, req: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(req).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, token: Option<&str>, uri: &str) -> Reply {
        let mut req = Request::get(uri);
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        self.request(req.body(Body::empty()).unwrap()).await
    }

    pub async fn send_json(
        &self,
        method: &str,
        token: Option<&str>,
        uri: &str,
        body: &Value,
    ) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        self.request(
            req.body(Body::from(serde_json::to_vec(body).unwrap()))
                .unwrap(),
        )
        .await
    }

    pub async fn ingest(&self, token: &str, batch: &Value) -> Reply {
        self.send_json("POST", Some(token), "/v1/ingest", batch)
            .await
    }

    /// The team, owning `namespaces` from the beginning of data (2000-01-01): as if it always had,
    /// whatever the test's windows' dates.
    pub async fn put_team(&self, team: &str, namespaces: &[&str]) -> Reply {
        self.put_team_from(team, namespaces, "2000-01-01T00:00:00Z")
            .await
    }

    /// The team, owning `namespaces` from `from` on (and those it leaves out, to no team).
    pub async fn put_team_from(&self, team: &str, namespaces: &[&str], from: &str) -> Reply {
        let r = self
            .send_json(
                "PUT",
                Some(&self.admin),
                &format!("/v1/teams/{team}"),
                &json!({"namespaces": namespaces, "cost_center": format!("CC-{team}"),
                        "gl_account": "6420", "effective_from": from,
                        "reason": "the test's teams"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        r
    }

    /// Runs `slicemeter ARGS` against this test's database, from the repository root.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_slicemeter"))
            .args(args)
            .env("DATABASE_URL", &self.database_url)
            .env("RUST_LOG", "error")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap()
    }

    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap()
    }
}

pub const H100: &str = "GPU-00000000-0000-4000-8000-000000000100";
pub const MIG_3G: &str = "MIG-00000000-0000-4000-8000-000000000009";
pub const MIG_1G_A: &str = "MIG-00000000-0000-4000-8000-000000000019";
pub const MIG_1G_B: &str = "MIG-00000000-0000-4000-8000-000000000020";

/// An H100 cut with `nvidia-smi mig -cgi 9,19,19`: one 3g.40gb and two 1g.10gb.
/// The fields a 4xx names, with their messages, in order.
pub fn fields(r: &Reply) -> Vec<(String, String)> {
    r.body["error"]["fields"]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|f| {
            (
                f["field"].as_str().unwrap().to_owned(),
                f["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The fields a 4xx names, in order.
pub fn field_names(r: &Reply) -> Vec<String> {
    fields(r).into_iter().map(|(f, _)| f).collect()
}

pub fn h100_inventory() -> (Value, Value) {
    let gpus = json!([{"uuid": H100, "model": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984_i64,
                       "compute_slices": 7, "memory_slices": 8, "mig_enabled": true}]);
    let mig = |uuid: &str, profile: &str, id: i64, c: i64, m: i64, bytes: i64, gi: i64| {
        json!({"uuid": uuid, "gpu_uuid": H100, "kind": "mig", "profile": profile, "profile_id": id,
               "compute_slices": c, "memory_slices": m, "memory_bytes": bytes,
               "gpu_instance_id": gi})
    };
    // GPU instances 2, 7 and 8, as NVML numbers them on an H100 just reset.
    let slices = json!([
        mig(MIG_3G, "3g.40gb", 9, 3, 4, 42412802048, 2),
        mig(MIG_1G_A, "1g.10gb", 19, 1, 1, 10468982784, 7),
        mig(MIG_1G_B, "1g.10gb", 19, 1, 1, 10468982784, 8),
    ]);
    (gpus, slices)
}

/// A window of `slice` held by pod `pod` in namespace `ns`.
pub fn window(slice: &str, start: &str, end: &str, ns: &str, pod: &str, held: f64) -> Value {
    json!({"slice_uuid": slice, "start": start, "end": end,
           "consumer": {"namespace": ns, "pod": pod, "container": "main"},
           "held_seconds": held, "memory_byte_seconds": held * 2.0e9, "memory_peak_bytes": 4_000_000_000_i64,
           "compute_active_seconds": held / 4.0})
}

/// A batch from node `gpu-node-01` over `[start, end)` of the H100 above.
pub fn batch(start: &str, end: &str, windows: Vec<Value>) -> Value {
    let (gpus, slices) = h100_inventory();
    json!({"node": "gpu-node-01", "period": {"start": start, "end": end},
           "gpus": gpus, "slices": slices, "windows": windows})
}

/// `n` consecutive one-minute windows from 2026-10-01T00:00Z, alternating over the three slices.
pub fn minute_windows(n: usize) -> (String, String, Vec<Value>) {
    let t0: chrono::DateTime<chrono::Utc> = "2026-10-01T00:00:00Z".parse().unwrap();
    let slices = [MIG_3G, MIG_1G_A, MIG_1G_B];
    let minutes = n.div_ceil(3);
    let mut windows = Vec::new();
    for i in 0..n {
        let m = (i / 3) as i64;
        let s = (t0 + chrono::Duration::minutes(m)).to_rfc3339();
        let e = (t0 + chrono::Duration::minutes(m + 1)).to_rfc3339();
        windows.push(window(
            slices[i % 3],
            &s,
            &e,
            "nlp",
            &format!("pod-{}", i % 3),
            60.0,
        ));
    }
    (
        t0.to_rfc3339(),
        (t0 + chrono::Duration::minutes(minutes as i64)).to_rfc3339(),
        windows,
    )
}

/// The real server (`http::server::serve`, with its timeouts, and the `background` work `serve`
/// runs beside it) on a loopback port, for tests that need a socket: a browser, a child process, a
/// client that misbehaves on the wire.
pub struct Served {
    /// `http://127.0.0.1:<port>`
    pub base: String,
    /// `127.0.0.1:<port>`
    pub addr: String,
    stop: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    background: slicemeter::background::Background,
}

impl Served {
    /// Serves `app`'s database on `listener` until [`Served::stop`].
    pub fn on(app: &TestApp, listener: tokio::net::TcpListener, config: ServerConfig) -> Served {
        Served::with_pool(app.pool.clone(), listener, config)
    }

    /// Serves from `pool` (a request pool, as `serve` makes) on `listener` until [`Served::stop`].
    pub fn with_pool(
        pool: PgPool,
        listener: tokio::net::TcpListener,
        config: ServerConfig,
    ) -> Served {
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let state = slicemeter::http::state::AppState::new(pool, config);
        let background = slicemeter::background::start(state.background());
        let server = tokio::spawn(slicemeter::http::server::serve(
            state,
            listener,
            async move {
                let _ = stopped.changed().await;
            },
        ));
        Served {
            base: format!("http://{addr}"),
            addr,
            stop,
            server,
            background,
        }
    }

    /// Stops accepting, lets in-flight requests finish, and fails the test if serving failed.
    pub async fn stop(self) {
        self.stop.send(true).unwrap();
        self.server.await.unwrap().unwrap();
        self.background
            .stop(std::time::Duration::from_secs(30))
            .await;
    }
}

impl TestApp {
    /// Serves this app's database on a fresh loopback port.
    pub async fn serve(&self, config: ServerConfig) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Served::on(self, listener, config)
    }
}

/// Applies the embedded migrations numbered `versions` to `pool`, as an older release would have
/// left a database: for upgrade tests.
pub async fn apply_migrations(pool: &PgPool, versions: std::ops::RangeInclusive<i64>) {
    for m in slicemeter::db::MIGRATOR
        .iter()
        .filter(|m| versions.contains(&m.version))
    {
        sqlx::raw_sql(&m.sql).execute(pool).await.unwrap();
    }
}
