//! Reading a JSON request body under a size limit, with errors that name the offending field
//! (`messages[0].content`) instead of axum's plain-text rejections.

use axum::body::Body;
use axum::http::header::CONTENT_LENGTH;
use axum::http::Request;
use std::time::Duration;

use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::protocol::refused::unread_field;

/// Bodies up to this size are read to the end even when over the limit, so that the client has
/// finished sending when the 413 arrives (a client still writing would see a broken pipe).
const DRAIN_CAP: u64 = 64 * 1024 * 1024;

/// Reads the whole body within `timeout`, refusing more than `limit` bytes with a 413 and a
/// body still arriving after `timeout` with a 408 (a client trickling bytes holds a connection
/// and a buffer for as long as it likes otherwise).
pub async fn read_limited(
    req: Request<Body>,
    limit: usize,
    timeout: Duration,
) -> Result<axum::body::Bytes, ApiError> {
    tokio::time::timeout(timeout, read_all(req, limit))
        .await
        .map_err(|_| ApiError::body_timeout(timeout))?
}

async fn read_all(req: Request<Body>, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > DRAIN_CAP) {
        return Err(ApiError::payload_too_large(limit));
    }
    let mut body = req.into_body().into_data_stream();
    // Sized once from the declared length (never past the limit), not grown by doubling.
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n.min(limit as u64) as usize));
    let mut total: u64 = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::invalid(format!("Could not read the request body: {e}")))?;
        total += chunk.len() as u64;
        if total <= limit as u64 {
            buf.extend_from_slice(&chunk);
        } else if total > DRAIN_CAP {
            break;
        }
    }
    if total > limit as u64 {
        return Err(ApiError::payload_too_large(limit));
    }
    Ok(buf.into())
}

/// Parses JSON into `T`. Syntax errors and type errors become 400s; a type error names its field.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    parse_request(bytes, None)
}

/// [`parse`], also refusing every field that `T` does not read, by name: a field the server
/// skipped would silently change nothing. Top-level fields in `inert` are accepted as no-ops
/// (`user`, `metadata`: they change nothing in the answer).
pub fn parse_strict<T: DeserializeOwned>(bytes: &[u8], inert: &[&str]) -> Result<T, ApiError> {
    parse_request(bytes, Some(inert))
}

fn parse_request<T: DeserializeOwned>(bytes: &[u8], inert: Option<&[&str]>) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "The request body is empty; expected a JSON object.",
        ));
    }
    let mut unread: Option<String> = None;
    let mut note = |path: serde_ignored::Path| {
        let path = dotted(&path);
        if unread.is_none() && !inert.is_some_and(|i| i.contains(&path.as_str())) {
            unread = Some(path);
        }
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T =
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(&mut de, &mut note))
            .map_err(|e| {
                let path = e.path().to_string();
                describe(e.into_inner(), &path)
            })?;
    de.end().map_err(|e| describe(e, "."))?;
    match (inert, unread) {
        (Some(_), Some(path)) => Err(unread_field(&path)),
        _ => Ok(value),
    }
}

/// `messages[0].name`, the way errors name fields.
fn dotted(path: &serde_ignored::Path) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", dotted(parent)),
        Path::Map { parent, key } => match dotted(parent) {
            p if p.is_empty() => key.clone(),
            p => format!("{p}.{key}"),
        },
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => dotted(parent),
    }
}

fn describe(e: serde_json::Error, path: &str) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::invalid(format!("The request body is not valid JSON: {e}"))
        }
        Category::Data if path == "." || path.is_empty() => {
            ApiError::invalid(format!("Invalid request: {e}"))
        }
        Category::Data => ApiError::invalid_param(path, format!("Invalid value for `{path}`: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Req {
        model: String,
        n: Option<i64>,
        messages: Vec<Msg>,
    }
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Msg {
        role: String,
        content: String,
    }

    #[test]
    fn malformed_json_is_400() {
        let e = parse::<Req>(br#"{"model": "x", "#).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
    }

    #[test]
    fn wrong_type_names_the_field() {
        let e = parse::<Req>(br#"{"model": "x", "messages": [{"role": "user", "content": 5}]}"#)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content"));
        assert!(e.message.contains("invalid type"), "{}", e.message);
    }

    #[test]
    fn missing_field_and_trailing_garbage() {
        let e = parse::<Req>(br#"{"model": "x"}"#).unwrap_err();
        assert!(
            e.message.contains("missing field `messages`"),
            "{}",
            e.message
        );
        let e = parse::<Req>(br#"{"model": "x", "messages": []} trailing"#).unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        let e = parse::<Req>(b"  ").unwrap_err();
        assert!(e.message.contains("empty"), "{}", e.message);
    }

    #[tokio::test]
    async fn body_over_limit_is_413() {
        let req = Request::builder()
            .body(Body::from(vec![b' '; 100]))
            .unwrap();
        let e = read_limited(req, 10, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        // Declared far beyond what the server drains: refused without reading.
        let req = Request::builder()
            .header(CONTENT_LENGTH, (DRAIN_CAP + 1).to_string())
            .body(Body::from("{}"))
            .unwrap();
        let e = read_limited(req, 10, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        // Chunked, undeclared, over the limit only after several chunks.
        let chunks = (0..4).map(|_| Ok::<_, std::io::Error>(vec![b' '; 6]));
        let req = Request::builder()
            .body(Body::from_stream(futures_util::stream::iter(chunks)))
            .unwrap();
        let e = read_limited(req, 20, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        let req = Request::builder().body(Body::from("{}")).unwrap();
        assert_eq!(
            &read_limited(req, 10, Duration::from_secs(5)).await.unwrap()[..],
            b"{}"
        );
    }

    #[test]
    fn strict_parsing_names_fields_nobody_reads() {
        let body = br#"{"model": "x", "messages": [{"role": "u", "content": "c", "extra": 1}], "user": "me"}"#;
        assert!(parse::<Req>(body).is_ok());
        let e = parse_strict::<Req>(body, &["user"]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].extra"));
        let body = br#"{"model": "x", "messages": [], "user": "me", "functions": []}"#;
        let e = parse_strict::<Req>(body, &["user"]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("functions"));
        assert!(parse_strict::<Req>(
            br#"{"model": "x", "messages": [], "user": "me"}"#,
            &["user"]
        )
        .is_ok());
    }

    #[tokio::test]
    async fn a_body_that_never_ends_is_408() {
        let (_tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let req = Request::builder().body(Body::from_stream(stream)).unwrap();
        let e = read_limited(req, 100, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::REQUEST_TIMEOUT);
    }
}
