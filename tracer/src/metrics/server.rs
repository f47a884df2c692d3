//! The HTTP side of the exporter (hyper): `/metrics` in the format the scraper asks for,
//! `/health` for liveness checks, nothing else.
//!
//! The server runs as tasks beside the pipeline and only reads the shared snapshot. When the
//! run ends, [`MetricsServer::shutdown`] closes the listener (a new scrape is refused at once)
//! and answers what is still in flight with 503, so a scrape during shutdown gets an error,
//! never a hang.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::exposition::{Exposition, Format, SharedSnapshot};

/// `/health` fails once the pipeline has not published a snapshot for this long: the tracer is
/// stuck even though the process answers.
pub const STALE_AFTER: Duration = Duration::from_secs(30);
/// How long a connection may take to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutting down waits for connections still being answered.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(
        "{0} is not a loopback address: the metrics name this host's containers and flows; \
         add --allow-non-loopback to serve them beyond this host"
    )]
    NotLoopback(SocketAddr),
}

/// Refuse a non-loopback address unless asked for.
pub fn check_listen(addr: SocketAddr, allow_non_loopback: bool) -> Result<(), ServeError> {
    if addr.ip().is_loopback() || allow_non_loopback {
        Ok(())
    } else {
        Err(ServeError::NotLoopback(addr))
    }
}

struct State {
    exposition: Exposition,
    snapshot: SharedSnapshot,
    stopping: watch::Receiver<bool>,
}

/// A running metrics endpoint.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Listen on `addr` and serve `snapshot` until [`MetricsServer::shutdown`] (or drop).
    pub async fn bind(addr: SocketAddr, snapshot: SharedSnapshot) -> Result<Self, ServeError> {
        let listener = TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind { addr, source })?;
        let (stop, stopping) = watch::channel(false);
        let state = Arc::new(State { exposition: Exposition::new(snapshot.clone()), snapshot, stopping });
        let accept = tokio::spawn(accept_loop(listener, state));
        Ok(Self { addr, stop, accept })
    }

    /// Where it listens (the port chosen when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting (the listener is closed), answer requests in flight with 503 and give
    /// their connections a moment to finish.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut self.accept).await.is_err() {
            self.accept.abort();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    let mut stopping = state.stopping.clone();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            biased;
            () = stopped(&mut stopping) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, state.clone()));
                }
                // Out of file descriptors and the like: wait a little rather than spin.
                Err(e) => {
                    log::warn!("metrics: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    // Connections finish what they answer (503 from now on); then they are closed.
    while connections.join_next().await.is_some() {}
}

async fn serve_connection(stream: tokio::net::TcpStream, state: Arc<State>) {
    let mut stopping = state.stopping.clone();
    let service_state = state.clone();
    let service = hyper::service::service_fn(move |req| {
        let state = service_state.clone();
        async move { Ok::<_, Infallible>(respond(&state, &req)) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                log::debug!("metrics: connection ended: {e}");
            }
        }
        () = stopped(&mut stopping) => {
            // Finish the request being answered, then close; an idle keep-alive closes now.
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Resolves once the server is told to stop (or its owner is gone).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn respond(state: &State, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if state.stopping.has_changed().is_err() || *state.stopping.borrow() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "cctrace is shutting down\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
            let format = Format::negotiate(accept);
            match state.exposition.render(format) {
                Ok(body) => {
                    let mut response = text(StatusCode::OK, body);
                    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
                    response
                }
                Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "encoding the metrics failed\n"),
            }
        }
        "/health" => match state.snapshot.age() {
            Some(age) if age <= STALE_AFTER => text(StatusCode::OK, "ok\n"),
            Some(age) => {
                text(StatusCode::SERVICE_UNAVAILABLE, format!("stale: no evaluation for {:.0} s\n", age.as_secs_f64()))
            }
            None => text(StatusCode::SERVICE_UNAVAILABLE, "starting: no evaluation yet\n"),
        },
        "/" => text(StatusCode::OK, "cctrace exporter: /metrics, /health\n"),
        _ => text(StatusCode::NOT_FOUND, "not found: /metrics, /health\n"),
    }
}

#[cfg(test)]
mod tests;
