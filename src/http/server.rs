//! The HTTP server (hyper, with header-read and idle timeouts) and its graceful shutdown. The work
//! `serve` runs beside it (partitions, retention, alerts) is `background`'s.

use std::time::Duration;

use tokio::net::TcpListener;

use super::state::AppState;

/// Serves on `listener` until `shutdown` resolves, then finishes in-flight requests (for at most
/// the request timeout). A connection that has not sent a whole header block within the header
/// read timeout, or on which no byte has moved for the idle timeout, is closed: a client that
/// opens connections and trickles bytes cannot hold the server's sockets.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;

    let (header_timeout, idle_timeout, request_timeout) = (
        state.config.header_read_timeout,
        state.config.idle_timeout,
        state.config.request_timeout,
    );
    let app = super::router(state);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder.http2().timer(TokioTimer::new());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: wait a moment, keep serving the rest.
                Err(e) => {
                    tracing::warn!(error = %e, "Accepting a connection failed.");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let io = TokioIo::new(IdleTimeout::new(stream, idle_timeout));
        let conn = builder
            .serve_connection_with_upgrades(io, TowerToHyperService::new(app.clone()))
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "A connection ended with an error.");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(request_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "Requests still running after the request timeout were cut off at shutdown."
        );
    }
    Ok(())
}

/// A connection that fails once no byte has been read or written on it for `timeout`.
pub struct IdleTimeout<S> {
    inner: S,
    timeout: Duration,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<S> IdleTimeout<S> {
    pub fn new(inner: S, timeout: Duration) -> Self {
        IdleTimeout {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    fn moved(&mut self) {
        let at = tokio::time::Instant::now() + self.timeout;
        self.deadline.as_mut().reset(at);
    }

    /// On a pending read or write: the error that ends an idle connection, once its time is up.
    fn expired(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Error> {
        self.deadline.as_mut().poll(cx).map(|()| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the connection was idle for longer than the idle timeout",
            )
        })
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for IdleTimeout<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = self.get_mut();
        match std::pin::Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.moved();
                Poll::Ready(r)
            }
            Poll::Pending => this.expired(cx).map(Err),
        }
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for IdleTimeout<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = self.get_mut();
        match std::pin::Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                this.moved();
                Poll::Ready(r)
            }
            Poll::Pending => this.expired(cx).map(Err),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = self.get_mut();
        match std::pin::Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                this.moved();
                Poll::Ready(r)
            }
            Poll::Pending => this.expired(cx).map(Err),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
