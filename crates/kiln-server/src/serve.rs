//! Running the server: bind, log the address, serve until SIGINT/SIGTERM, then stop accepting,
//! give in-flight requests a grace period, cancel what is left and stop the engine. A second
//! signal during that drain ends it at once.

use std::future::Future;
use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use kiln_engine::EngineHandle;
use kiln_tokenizer::Tokenizer;
use tokio::net::TcpListener;

use crate::app::router;
use crate::connections::{serve_connections, ConnectionLimits};
use crate::protocol::common::SamplingDefaults;
use crate::state::{Access, AppState, Limits, PromptRules};

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    pub limits: Limits,
    pub connections: ConnectionLimits,
    pub access: Access,
    pub rules: PromptRules,
    /// How long in-flight requests may run on after a shutdown signal before they are cancelled.
    pub shutdown_grace: Duration,
    /// The model's sampling defaults, for requests that leave those fields out.
    pub sampling_defaults: SamplingDefaults,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            host: "127.0.0.1".to_string(),
            port: 8000,
            limits: Limits::default(),
            connections: ConnectionLimits::default(),
            access: Access::default(),
            rules: PromptRules::default(),
            shutdown_grace: Duration::from_secs(30),
            sampling_defaults: SamplingDefaults::default(),
        }
    }
}

/// Serves on `opts.host:opts.port` until SIGINT or SIGTERM.
pub async fn serve(
    handle: EngineHandle,
    tokenizer: Tokenizer,
    model_name: String,
    opts: ServeOptions,
) -> anyhow::Result<()> {
    let listener = TcpListener::from_std(bind(&opts.host, opts.port)?)?;
    serve_on_signals(
        listener,
        handle,
        tokenizer,
        model_name,
        opts,
        shutdown_signal(),
        shutdown_signal,
    )
    .await
}

/// Binds the listening socket. The binary does this before loading a model, so that a busy
/// port fails in a moment rather than after the weights have loaded. The error says which of
/// host and port is at fault.
pub fn bind(host: &str, port: u16) -> anyhow::Result<std::net::TcpListener> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| anyhow!("cannot listen on `{host}`: not an IP address or a host name this machine can resolve ({e})"))?
        .collect();
    let mut failure = None;
    for addr in &addrs {
        match std::net::TcpListener::bind(addr) {
            Ok(listener) => {
                listener.set_nonblocking(true)?;
                return Ok(listener);
            }
            Err(e) => failure = Some((*addr, e)),
        }
    }
    let Some((addr, e)) = failure else {
        return Err(anyhow!(
            "cannot listen on `{host}`: it resolves to no address"
        ));
    };
    let why = match e.kind() {
        ErrorKind::AddrInUse => format!("port {port} is in use (is another server running?)"),
        ErrorKind::AddrNotAvailable => format!("`{host}` is not an address of this machine"),
        ErrorKind::PermissionDenied => {
            format!("permission denied (ports below 1024 need privileges): {e}")
        }
        _ => e.to_string(),
    };
    Err(anyhow!("cannot listen on {addr}: {why}"))
}

/// Serves on `listener` (from [`bind`]) until SIGINT or SIGTERM, on a tokio runtime of its
/// own, for callers that are not async (the `kiln` binary).
pub fn serve_blocking(
    listener: std::net::TcpListener,
    handle: EngineHandle,
    tokenizer: Tokenizer,
    model_name: String,
    opts: ServeOptions,
) -> anyhow::Result<()> {
    return_large_buffers_to_the_os();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kiln-http")
        .build()
        .context("cannot start the HTTP runtime")?;
    let engine = handle.clone();
    let result = runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        serve_on_signals(
            listener,
            handle,
            tokenizer,
            model_name,
            opts,
            shutdown_signal(),
            shutdown_signal,
        )
        .await
    });
    if result.is_err() {
        // serve_on stops the engine on its way out, except when it failed to start.
        engine.shutdown();
    }
    // A prompt job still running after a forced exit must not hold the process.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Serves on an already bound listener until `shutdown` resolves; for tests and embedding.
pub async fn serve_on(
    listener: TcpListener,
    handle: EngineHandle,
    tokenizer: Tokenizer,
    model_name: String,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let never = || std::future::pending::<()>();
    serve_on_signals(
        listener, handle, tokenizer, model_name, opts, shutdown, never,
    )
    .await
}

/// [`serve_on`], where `force()` (listened to once `shutdown` has resolved) cuts the drain
/// short: open connections are closed and in-flight requests cancelled at once.
pub async fn serve_on_signals<F, Fut>(
    listener: TcpListener,
    handle: EngineHandle,
    tokenizer: Tokenizer,
    model_name: String,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
    force: F,
) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!("kiln serving `{model_name}` at http://{addr} (OpenAI API under /v1)");
    let state = AppState::new(handle.clone(), tokenizer, model_name, opts.limits)
        .with_access(opts.access)
        .with_rules(opts.rules)
        .with_sampling_defaults(opts.sampling_defaults);
    let engine = handle.clone();
    let grace = opts.shutdown_grace;
    let on_signal = async move {
        shutdown.await;
        tracing::info!(
            "shutting down: not accepting connections; in-flight requests have {grace:?} \
             (a second signal stops at once)"
        );
        // Connections still open after the grace period are streams still generating: cancel
        // them in the engine so that they end and the server can return.
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            tracing::warn!("grace period over: cancelling in-flight requests");
            stop_engine(engine).await;
        });
    };
    let connections = opts.connections.fitted_to_fd_limit();
    serve_connections(
        listener,
        router(Arc::new(state)),
        connections,
        on_signal,
        force,
    )
    .await;
    stop_engine(handle).await;
    tracing::info!("kiln stopped");
    Ok(())
}

/// Request bodies of megabytes come and go. glibc raises its mmap threshold after the first
/// such buffer is freed and from then on keeps them in per-thread arenas, so a burst of large
/// requests would leave the process hundreds of megabytes larger for good. A fixed threshold
/// keeps every buffer of 1 MiB and more mapped on its own and given back when freed.
fn return_large_buffers_to_the_os() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before the runtime's
    // threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// `EngineHandle::shutdown` joins the engine thread; keep it off the async workers.
async fn stop_engine(handle: EngineHandle) {
    if let Err(e) = tokio::task::spawn_blocking(move || handle.shutdown()).await {
        tracing::error!("engine shutdown failed: {e}");
    }
}

/// Resolves on the next SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("received SIGINT"),
        _ = term => tracing::info!("received SIGTERM"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_errors_say_what_is_wrong() {
        let e = bind("no such host!", 8000).unwrap_err().to_string();
        assert!(e.contains("not an IP address or a host name"), "{e}");
        assert!(!e.contains("port"), "{e}");
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let e = bind("127.0.0.1", port).unwrap_err().to_string();
        assert!(e.contains("in use"), "{e}");
        // TEST-NET-1 is never an address of this machine.
        let e = bind("192.0.2.1", 0).unwrap_err().to_string();
        assert!(e.contains("not an address of this machine"), "{e}");
    }
}
