//! Connections that never finish their headers are closed after the header deadline, a body
//! that trickles in is cut off at the body deadline, and past the connection cap new clients
//! get a prompt 503 instead of hanging (issue 19, item 4).

use crate::support;

use std::time::{Duration, Instant};

use kiln_server::{ConnectionLimits, Limits, ServeOptions};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn opts(max_connections: usize) -> ServeOptions {
    ServeOptions {
        connections: ConnectionLimits {
            header_timeout: Duration::from_millis(400),
            max_connections,
        },
        limits: Limits {
            body_timeout: Duration::from_millis(400),
            ..Limits::default()
        },
        ..ServeOptions::default()
    }
}

/// Waits until the server closes `sock` (end of stream or reset); returns what it sent first.
async fn closed_within(sock: &mut TcpStream, limit: Duration) -> String {
    let mut got = Vec::new();
    let read = tokio::time::timeout(limit, sock.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "still open after {limit:?}");
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_are_closed_and_others_are_served_meanwhile() {
    let (engine, tokenizer) = start_engine(engine_config());
    let server = live(engine, tokenizer, opts(256)).await;
    let addr = server.addr;
    // 40 connections that send nothing, 40 that stop in the middle of their headers.
    let mut idle = Vec::new();
    for i in 0..80 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        if i % 2 == 1 {
            s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
                .await
                .unwrap();
        }
        idle.push(s);
    }
    let opened = Instant::now();
    // Served while they are all open.
    let (status, body) = http(addr, "GET", "/health", b"").await;
    assert_eq!(status, 200, "{body}");
    let req = br#"{"prompt": "hi", "max_tokens": 3, "ignore_eos": true}"#;
    let (status, body) = http(addr, "POST", "/v1/completions", req).await;
    assert_eq!(status, 200, "{body}");
    for s in &mut idle {
        closed_within(s, Duration::from_secs(5)).await;
    }
    assert!(opened.elapsed() >= Duration::from_millis(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_in_is_cut_off() {
    let (engine, tokenizer) = start_engine(engine_config());
    let server = live(engine, tokenizer, opts(16)).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
        .await
        .unwrap();
    let reply = closed_within(&mut s, Duration::from_secs(5)).await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("request_timeout"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_clients_get_503_at_once_and_service_resumes() {
    let (engine, tokenizer) = start_engine(engine_config());
    let server = live(engine, tokenizer, opts(8)).await;
    let addr = server.addr;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // Let the server accept all eight before the ninth arrives.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = Instant::now();
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let reply = closed_within(&mut extra, Duration::from_secs(2)).await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("too_many_connections"), "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("retry-after: 1"),
        "{reply}"
    );
    assert!(t0.elapsed() < Duration::from_secs(2));
    // The held ones time out; then the server takes new clients again.
    for s in &mut held {
        closed_within(s, Duration::from_secs(5)).await;
    }
    let (status, body) = http(addr, "GET", "/health", b"").await;
    assert_eq!(status, 200, "{body}");
}
