//! `--api-key`: every request but `/health` (and `/metrics`, unless asked) must carry
//! `Authorization: Bearer KEY`; others get OpenAI's 401.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::Access;

pub async fn require_key(State(access): State<Arc<Access>>, req: Request, next: Next) -> Response {
    let Some(key) = access.api_key.as_deref() else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    let open = path == "/health" || (path == "/metrics" && !access.metrics_need_key);
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if open || given.is_some_and(|g| same(g.as_bytes(), key.as_bytes())) {
        next.run(req).await
    } else {
        ApiError::unauthorized().into_response()
    }
}

/// Compares in time that depends on the lengths only, not on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
