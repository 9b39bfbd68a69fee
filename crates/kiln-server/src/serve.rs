//! Running the server: bind, log the address, serve until SIGINT/SIGTERM, then stop accepting,
//! give in-flight requests a grace period, cancel what is left and stop the engine.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kiln_engine::EngineHandle;
use kiln_tokenizer::Tokenizer;
use tokio::net::TcpListener;

use crate::app::router;
use crate::state::{AppState, Limits};

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    pub limits: Limits,
    /// How long in-flight requests may run on after a shutdown signal before they are cancelled.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            host: "127.0.0.1".to_string(),
            port: 8000,
            limits: Limits::default(),
            shutdown_grace: Duration::from_secs(30),
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
    let listener = TcpListener::bind((opts.host.as_str(), opts.port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}:{} (is the port in use?)",
                opts.host, opts.port
            )
        })?;
    serve_on(
        listener,
        handle,
        tokenizer,
        model_name,
        opts,
        shutdown_signal(),
    )
    .await
}

/// Binds the listening socket. The binary does this before loading a model, so that a busy
/// port fails in a moment rather than after the weights have loaded.
pub fn bind(host: &str, port: u16) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind((host, port))
        .with_context(|| format!("cannot listen on {host}:{port} (is the port in use?)"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kiln-http")
        .build()
        .context("cannot start the HTTP runtime")?;
    let engine = handle.clone();
    let result = runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        serve_on(
            listener,
            handle,
            tokenizer,
            model_name,
            opts,
            shutdown_signal(),
        )
        .await
    });
    if result.is_err() {
        // serve_on stops the engine on its way out, except when it failed to start.
        engine.shutdown();
    }
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
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!("kiln serving `{model_name}` at http://{addr} (OpenAI API under /v1)");
    let state = Arc::new(AppState::new(
        handle.clone(),
        tokenizer,
        model_name,
        opts.limits,
    ));
    let engine = handle.clone();
    let grace = opts.shutdown_grace;
    let on_signal = async move {
        shutdown.await;
        tracing::info!(
            "shutting down: not accepting connections; in-flight requests have {grace:?}"
        );
        // Connections still open after the grace period are streams still generating: cancel
        // them in the engine so that they end and the server can return.
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            tracing::warn!("grace period over: cancelling in-flight requests");
            stop_engine(engine).await;
        });
    };
    axum::serve(listener, router(state))
        .with_graceful_shutdown(on_signal)
        .await
        .context("the HTTP server failed")?;
    stop_engine(handle).await;
    tracing::info!("kiln stopped");
    Ok(())
}

/// `EngineHandle::shutdown` joins the engine thread; keep it off the async workers.
async fn stop_engine(handle: EngineHandle) {
    if let Err(e) = tokio::task::spawn_blocking(move || handle.shutdown()).await {
        tracing::error!("engine shutdown failed: {e}");
    }
}

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
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
