//! Requests abandoned mid-way: a request whose client went away, or whose time ran out, has its
//! future dropped before it finished. The layer here tells the request pool so before the
//! request's connections are dropped (`db::request_abandoned`), and the pool closes a connection
//! still busy with the request's statement instead of waiting it out.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Wraps every request's future in [`Watched`].
#[derive(Debug, Clone, Copy)]
pub struct WatchLayer;

impl<S> tower::Layer<S> for WatchLayer {
    type Service = Watch<S>;

    fn layer(&self, inner: S) -> Watch<S> {
        Watch(inner)
    }
}

#[derive(Debug, Clone)]
pub struct Watch<S>(S);

impl<S: tower::Service<R>, R> tower::Service<R> for Watch<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = Watched<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Watched<S::Future> {
        Watched {
            inner: Box::pin(self.0.call(request)),
            done: false,
        }
    }
}

/// A request's future that notes the request abandoned if it is dropped before it finished.
pub struct Watched<F> {
    inner: Pin<Box<F>>,
    done: bool,
}

impl<F: Future> Future for Watched<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let polled = self.inner.as_mut().poll(cx);
        if polled.is_ready() {
            self.done = true;
        }
        polled
    }
}

impl<F> Drop for Watched<F> {
    /// Runs before `inner` (and the connections it holds) is dropped.
    fn drop(&mut self) {
        if !self.done {
            crate::db::request_abandoned();
        }
    }
}
