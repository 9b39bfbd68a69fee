//! Reading a JSON request body under a size limit, with errors that name the offending field
//! (`messages[0].content`) instead of axum's plain-text rejections.

use axum::body::Body;
use axum::http::header::CONTENT_LENGTH;
use axum::http::Request;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Bodies up to this size are read to the end even when over the limit, so that the client has
/// finished sending when the 413 arrives (a client still writing would see a broken pipe).
const DRAIN_CAP: u64 = 64 * 1024 * 1024;

/// Reads the whole body, refusing more than `limit` bytes with a 413.
pub async fn read_limited(req: Request<Body>, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > DRAIN_CAP) {
        return Err(ApiError::payload_too_large(limit));
    }
    let mut body = req.into_body().into_data_stream();
    let mut buf = Vec::new();
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
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "The request body is empty; expected a JSON object.",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        describe(e.into_inner(), &path)
    })?;
    de.end().map_err(|e| describe(e, "."))?;
    Ok(value)
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
        let e = read_limited(req, 10).await.unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        // Declared far beyond what the server drains: refused without reading.
        let req = Request::builder()
            .header(CONTENT_LENGTH, (DRAIN_CAP + 1).to_string())
            .body(Body::from("{}"))
            .unwrap();
        let e = read_limited(req, 10).await.unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        // Chunked, undeclared, over the limit only after several chunks.
        let chunks = (0..4).map(|_| Ok::<_, std::io::Error>(vec![b' '; 6]));
        let req = Request::builder()
            .body(Body::from_stream(futures_util::stream::iter(chunks)))
            .unwrap();
        let e = read_limited(req, 20).await.unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        let req = Request::builder().body(Body::from("{}")).unwrap();
        assert_eq!(&read_limited(req, 10).await.unwrap()[..], b"{}");
    }
}
