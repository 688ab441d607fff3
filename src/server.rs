//! `serve`: the HTTP server, with partitions kept ahead and a graceful shutdown.

use std::net::SocketAddr;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use tokio::net::TcpListener;

use crate::domain::time::{month_of, next_month};
use crate::http::{self, AppState, ServerConfig};

/// Creates this month's and the next two months' partitions, now and every hour, so that ingest
/// rarely has to.
pub fn keep_partitions_ahead(state: &AppState) -> tokio::task::JoinHandle<()> {
    let (pool, partitions) = (state.pool.clone(), state.partitions.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(3600));
        loop {
            tick.tick().await;
            let this = month_of(Utc::now());
            let months = [this, next_month(this), next_month(next_month(this))];
            if let Err(e) = partitions.ensure(&pool, &months).await {
                tracing::warn!(error = %e, "Creating partitions ahead failed; ingest will create them when needed.");
            }
        }
    })
}

/// Binds `addr` and serves until `shutdown` resolves, then finishes in-flight requests.
pub async fn serve(
    pool: PgPool,
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = AppState::new(pool, config);
    let maintenance = keep_partitions_ahead(&state);
    let app = http::router(state);
    let result = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await;
    maintenance.abort();
    result
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
    tracing::info!("Shutting down: finishing requests in flight.");
}
