//! Accepting connections: HTTP/1.1 with a deadline for each request's headers (which also closes
//! idle keep-alive connections), at most `max_connections` open at once (the rest are answered
//! 503 and closed at once, so the process never runs out of file descriptors), and a graceful
//! drain that a second signal cuts short.

use std::future::Future;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Limits on connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time a client has to send a request's headers, from the connection's start or the end
    /// of the previous response.
    pub header_timeout: Duration,
    /// Connections open at once; more are answered 503 and closed.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// Descriptors kept free for everything that is not a client connection (model files, logs,
/// the engine, the listener).
const RESERVED_FDS: u64 = 64;

impl ConnectionLimits {
    /// The limit lowered to what the process's open-file limit allows, saying so.
    pub fn fitted_to_fd_limit(mut self) -> ConnectionLimits {
        if let Some(soft) = open_file_limit() {
            let room = soft.saturating_sub(RESERVED_FDS).max(soft / 2).max(1);
            if (self.max_connections as u64) > room {
                tracing::warn!(
                    "--max-connections {} lowered to {room}: the process may open {soft} files \
                     (ulimit -n)",
                    self.max_connections
                );
                self.max_connections = room as usize;
            }
        }
        self
    }
}

/// The soft `RLIMIT_NOFILE`, where the system says (Linux: /proc/self/limits).
fn open_file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

const BUSY: &str =
    "{\"error\":{\"message\":\"The server has too many open connections; retry later.\",\
\"type\":\"server_error\",\"param\":null,\"code\":\"too_many_connections\"}}";

/// Refused connections lingering at once to be closed cleanly; past this they close at once.
const MAX_LINGERING: usize = 16;

/// Answers a connection over the limit with a 503 without serving it, and closes it.
fn refuse_busy(stream: TcpStream, lingering: &std::sync::Arc<Semaphore>) {
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{BUSY}",
        BUSY.len()
    );
    // The socket buffer takes a reply this small at once; a client that cannot take it loses
    // nothing it was promised.
    let _ = stream.try_write(reply.as_bytes());
    // Closed with the request still unread, the socket would send a reset that can reach the
    // client before the 503 does: read what has arrived, then (bounded in number and time, so
    // refusals cannot pile up descriptors) end the reply and wait a moment for the rest.
    let mut buf = [0u8; 4096];
    while matches!(stream.try_read(&mut buf), Ok(n) if n > 0) {}
    let Ok(permit) = lingering.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let drain = async { while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {} };
        let _ = tokio::time::timeout(Duration::from_millis(500), drain).await;
    });
}

/// Serves `app` on `listener` until `stop` resolves; then stops accepting, lets every
/// connection finish its request (idle ones close at once) and returns. `force`, made after
/// `stop` has resolved, ends the wait early: open connections are dropped.
pub async fn serve_connections<S, F, Fut>(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: S,
    force: F,
) where
    S: Future<Output = ()> + Send,
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let slots = std::sync::Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let lingering = std::sync::Arc::new(Semaphore::new(MAX_LINGERING));
    let (drain_tx, drain_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut last_accept_error: Option<Instant> = None;
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = stop.as_mut() => break,
            a = listener.accept() => a,
            // Reap finished connections as they go, so the set stays the size of what is open.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors (or another passing failure): wait a moment instead of
                // spinning, and say so once in a while rather than every time.
                let now = Instant::now();
                if last_accept_error.is_none_or(|t| now - t > Duration::from_secs(10)) {
                    tracing::warn!("cannot accept connections: {e}");
                    last_accept_error = Some(now);
                }
                if e.kind() != ErrorKind::ConnectionAborted {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            refuse_busy(stream, &lingering);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut drain = drain_rx.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = drain.wait_for(|d| *d) => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    drop(listener);
    let _ = drain_tx.send(true);
    let forced = tokio::select! {
        _ = async { while tasks.join_next().await.is_some() {} } => false,
        _ = force() => true,
    };
    if forced {
        tracing::warn!("second signal: closing {} connections now", tasks.len());
        tasks.abort_all();
    }
}
