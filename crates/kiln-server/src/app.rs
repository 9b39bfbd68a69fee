//! The router: routes, the API key check, the panic guard and the per-status request counter.

use std::any::Any;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;

use crate::auth::require_key;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::routes::{chat, completions, meta, tokenize};
use crate::state::AppState;

/// The whole API.
pub fn router(state: Arc<AppState>) -> Router {
    let metrics = state.metrics.clone();
    let access = Arc::new(state.access.clone());
    let routes = Router::new()
        .route("/health", get(meta::health))
        .route("/v1/models", get(meta::list_models))
        .route("/v1/models/{model}", get(meta::get_model))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/metrics", get(meta::metrics))
        .fallback(meta::not_found)
        .method_not_allowed_fallback(meta::method_not_allowed)
        .with_state(state)
        .layer(middleware::from_fn_with_state(access, require_key));
    with_middleware(routes, metrics)
}

/// Wraps routes so that a panic becomes a 500 JSON error (the server keeps serving) and every
/// response is counted by endpoint and status.
pub fn with_middleware(routes: Router, metrics: Arc<Metrics>) -> Router {
    routes
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(middleware::from_fn_with_state(metrics, count_responses))
}

fn panic_response(payload: Box<dyn Any + Send + 'static>) -> Response {
    let what = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!("a request handler panicked: {what}");
    ApiError::internal("Internal error while handling the request.").into_response()
}

/// A fixed label per route keeps the metric's cardinality bounded.
fn endpoint_label(path: &str) -> &'static str {
    match path {
        "/v1/chat/completions" => "chat_completions",
        "/v1/completions" => "completions",
        "/health" => "health",
        "/metrics" => "metrics",
        "/tokenize" => "tokenize",
        "/detokenize" => "detokenize",
        p if p == "/v1/models" || p.starts_with("/v1/models/") => "models",
        _ => "other",
    }
}

async fn count_responses(
    State(metrics): State<Arc<Metrics>>,
    req: Request,
    next: Next,
) -> Response {
    let endpoint = endpoint_label(req.uri().path());
    let response = next.run(req).await;
    metrics.record_response(endpoint, response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_panicking_handler_gives_500_json_and_is_counted() {
        let metrics = Arc::new(Metrics::default());
        let routes: Router = Router::new()
            .route(
                "/v1/completions",
                get(|| async {
                    if std::hint::black_box(true) {
                        panic!("planted failure");
                    }
                    "unreachable"
                }),
            )
            .route("/health", get(|| async { "fine" }));
        let app = with_middleware(routes, metrics.clone());
        let req = Request::builder()
            .uri("/v1/completions")
            .body(Body::empty())
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status().as_u16(), 500);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["type"], "server_error");
        // The same router keeps answering after the panic.
        let req = Request::builder()
            .uri("/health")
            .body(Body::empty())
            .unwrap();
        assert_eq!(app.oneshot(req).await.unwrap().status().as_u16(), 200);
        assert_eq!(metrics.requests_with_status("completions", 500), 1);
        assert_eq!(metrics.requests_with_status("health", 200), 1);
    }

    #[test]
    fn labels_are_bounded() {
        assert_eq!(endpoint_label("/v1/models/abc"), "models");
        assert_eq!(endpoint_label("/random/path"), "other");
    }
}
