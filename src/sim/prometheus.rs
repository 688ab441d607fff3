//! A real Prometheus server (Debian's `prometheus` package, or `$SLICEMETER_PROMETHEUS`) on loopback,
//! scraping the simulated exporters or serving blocks written with `promtool`: what the sources'
//! tests and benchmarks read, started and stopped by them. Missing, it is an error that says how to
//! install it, never a reason to skip.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A target Prometheus scrapes.
#[derive(Debug, Clone)]
pub struct ScrapeTarget {
    pub job: String,
    /// `host:port`.
    pub address: String,
    pub path: String,
}

/// A running Prometheus, stopped when dropped.
pub struct LocalPrometheus {
    child: Child,
    pub url: String,
    pub storage: PathBuf,
}

/// The `prometheus` binary: `$SLICEMETER_PROMETHEUS`, else the one on the PATH.
pub fn binary(name: &str) -> Result<PathBuf, String> {
    let var = format!("SLICEMETER_{}", name.to_ascii_uppercase());
    if let Some(p) = std::env::var_os(&var) {
        return Ok(PathBuf::from(p));
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!("{name} is not installed: `apt-get install prometheus` (Debian's package has prometheus and promtool), or set {var}")
        })
}

impl LocalPrometheus {
    /// Starts Prometheus with its data in `storage` (blocks already there are served; none is
    /// deleted for its age), scraping `targets` every `interval`, and waits until it is ready.
    pub fn start(
        storage: &Path,
        targets: &[ScrapeTarget],
        interval: Duration,
    ) -> Result<LocalPrometheus, String> {
        LocalPrometheus::start_labelled(storage, targets, interval, &[])
    }

    /// [`LocalPrometheus::start`] with `external_labels` in its configuration (what remote read
    /// adds to every series and the query API does not).
    pub fn start_labelled(
        storage: &Path,
        targets: &[ScrapeTarget],
        interval: Duration,
        external_labels: &[(&str, &str)],
    ) -> Result<LocalPrometheus, String> {
        let bin = binary("prometheus")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a free port: {e}"))?
            .port();
        std::fs::create_dir_all(storage).map_err(|e| format!("{}: {e}", storage.display()))?;
        let mut config = format!(
            "global:\n  scrape_interval: {}ms\n  scrape_timeout: {}ms\nscrape_configs:\n",
            interval.as_millis(),
            interval.as_millis()
        );
        if !external_labels.is_empty() {
            let labels: Vec<String> = external_labels
                .iter()
                .map(|(k, v)| format!("{k}: {}", serde_json::Value::String((*v).to_owned())))
                .collect();
            config = config.replacen(
                "scrape_configs:\n",
                &format!(
                    "  external_labels: {{{}}}\nscrape_configs:\n",
                    labels.join(", ")
                ),
                1,
            );
        }
        if targets.is_empty() {
            config.push_str("  []\n");
        }
        for t in targets {
            config.push_str(&format!(
                "  - job_name: {}\n    metrics_path: {}\n    static_configs: [{{targets: ['{}']}}]\n",
                t.job, t.path, t.address
            ));
        }
        let config_file = storage.join("prometheus.yml");
        std::fs::write(&config_file, config)
            .map_err(|e| format!("{}: {e}", config_file.display()))?;
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!("--storage.tsdb.path={}", storage.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=3650d")
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let mut p = LocalPrometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            storage: storage.to_owned(),
        };
        p.wait_ready(Duration::from_secs(60))?;
        Ok(p)
    }

    fn wait_ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let ready = format!("{}/-/ready", self.url.trim_start_matches("http://"));
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("prometheus exited: {status}"));
            }
            if http_get_ok(&ready) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("prometheus was not ready within {within:?}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Whether `GET http://<host:port/path>` answers 200, with a plain blocking socket.
fn http_get_ok(address_path: &str) -> bool {
    use std::io::{Read, Write};
    let (address, path) = address_path
        .split_once('/')
        .map_or((address_path, ""), |(a, p)| (a, p));
    let Ok(mut s) = std::net::TcpStream::connect(address) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(s, "GET /{path} HTTP/1.0\r\nHost: {address}\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

impl Drop for LocalPrometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
