//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with a 4xx or 5xx
//! status, so that OpenAI clients raise their usual exception types.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// An error a handler returns to the client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `rate_limit_error`, `server_error`...
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before retrying (`Retry-After`), on 429 and 503.
    pub retry_after: Option<u64>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is malformed or asks for something impossible.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the field at fault.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::invalid(message).with_param(param)
    }

    /// 400: prompt plus completion do not fit the model's context.
    pub fn context_length(message: impl Into<String>) -> ApiError {
        ApiError::invalid(message).with_code("context_length_exceeded")
    }

    /// 404: the request names a model this server does not serve.
    pub fn model_not_found(requested: &str, served: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model `{requested}` does not exist. This server serves `{served}`."),
        )
        .with_param("model")
        .with_code("model_not_found")
    }

    /// 404: no such route.
    pub fn route_not_found(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("Unknown endpoint {method} {path}."),
        )
        .with_code("unknown_url")
    }

    /// 405: the route exists but not with this method.
    pub fn method_not_allowed(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("Method {method} is not allowed on {path}."),
        )
    }

    /// 413: the body is larger than the server accepts.
    pub fn payload_too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("Request body is larger than the server limit of {limit} bytes."),
        )
        .with_code("payload_too_large")
    }

    /// 429: the engine's queue is full; the client may retry after a second.
    pub fn queue_full(message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
            .with_code("queue_full");
        e.retry_after = Some(1);
        e
    }

    /// 408: the body did not arrive in time.
    pub fn body_timeout(limit: std::time::Duration) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!(
                "The request body did not arrive within {} s.",
                limit.as_secs_f64()
            ),
        )
        .with_code("request_timeout")
    }

    /// 401: no API key, or the wrong one.
    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Incorrect or missing API key. Send it as `Authorization: Bearer KEY`.",
        )
        .with_code("invalid_api_key")
    }

    /// 503: the server is shutting down or the engine stopped.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
            .with_code("service_unavailable")
    }

    /// 500: something failed inside the server.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
            .with_code("internal_error")
    }

    pub fn with_param(mut self, param: &str) -> ApiError {
        self.param = Some(param.to_string());
        self
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// The JSON body, also used for error events inside a stream.
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(ErrorBody {
            error: ErrorDetail {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        })
        .unwrap_or_default()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_openai_shape() {
        let e = ApiError::invalid_param("temperature", "temperature must be in [0, 2]");
        let b = e.body();
        assert_eq!(b["error"]["message"], "temperature must be in [0, 2]");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert_eq!(b["error"]["param"], "temperature");
        assert!(b["error"]["code"].is_null());
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn queue_full_says_when_to_retry() {
        let resp = ApiError::queue_full("busy").into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()["retry-after"], "1");
        let resp = ApiError::invalid("no").into_response();
        assert!(resp.headers().get("retry-after").is_none());
    }

    #[test]
    fn model_not_found_is_404_with_code() {
        let e = ApiError::model_not_found("gpt-4", "tiny");
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        assert_eq!(e.body()["error"]["code"], "model_not_found");
        assert!(e.message.contains("gpt-4") && e.message.contains("tiny"));
    }
}
