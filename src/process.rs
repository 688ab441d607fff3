//! What every slicemeter process sets up the same way: logs to standard error, one Prometheus
//! recorder (served by the API's `/metrics`, or, in a process without an API such as `collect`, by
//! [`serve_metrics`] on an address of its own), the signals that stop it, and its peak memory.

use std::net::SocketAddr;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// Logs to standard error, filtered by `RUST_LOG` (default `info`, sqlx's statements at `warn`);
/// coloured only on a terminal, so that a log file or journal holds plain text.
pub fn init_tracing() {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// The process-wide Prometheus recorder; installed on first use, whatever asks for it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ])
                .expect("bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (a host program); ours then only renders.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Installs the recorder and serves `GET /metrics` (the text exposition format) on `addr` until
/// the process ends; returns the address bound (for port 0, the one chosen).
pub async fn serve_metrics(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let handle = metrics_handle();
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let handle = handle.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4",
                    )],
                    handle.render(),
                )
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "Serving /metrics stopped.");
        }
    });
    tracing::info!(address = %bound, "Metrics are served at /metrics.");
    Ok(bound)
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler installs");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
    tracing::info!("Shutting down: finishing what is in flight.");
}

/// Peak resident memory of a running process (Linux's VmHWM), in KiB; none where `/proc` does not
/// say.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
