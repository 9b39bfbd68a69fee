//! The small endpoints: `/health`, `/v1/models`, `/metrics`, and the 404/405 answers.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::metrics::Gauge;
use crate::state::AppState;

pub async fn health(State(st): State<Arc<AppState>>) -> Response {
    let stats = st.engine.stats();
    let body = json!({
        "status": "ok",
        "model": st.model_name,
        "running": stats.running,
        "waiting": stats.waiting,
    });
    (StatusCode::OK, Json(body)).into_response()
}

fn model_card(st: &AppState) -> Value {
    json!({
        "id": st.model_name,
        "object": "model",
        "created": st.started,
        "owned_by": "kiln",
        "max_model_len": st.engine.max_context(),
    })
}

pub async fn list_models(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({ "object": "list", "data": [model_card(&st)] }))
}

pub async fn get_model(
    State(st): State<Arc<AppState>>,
    Path(model): Path<String>,
) -> Result<Json<Value>, ApiError> {
    st.check_model(Some(&model))?;
    Ok(Json(model_card(&st)))
}

pub async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let s = st.engine.stats();
    let gauges = [
        Gauge {
            name: "kiln_requests_running",
            help: "Sequences the engine is running.",
            value: s.running as f64,
            counter: false,
        },
        Gauge {
            name: "kiln_requests_waiting",
            help: "Sequences waiting for admission.",
            value: s.waiting as f64,
            counter: false,
        },
        Gauge {
            name: "kiln_kv_blocks_used",
            help: "KV cache blocks in use.",
            value: s.kv_blocks_used as f64,
            counter: false,
        },
        Gauge {
            name: "kiln_kv_blocks_free",
            help: "KV cache blocks free.",
            value: s.kv_blocks_free as f64,
            counter: false,
        },
        Gauge {
            name: "kiln_kv_blocks_cached",
            help: "KV cache blocks the prefix cache can hand to a new request (held or idle).",
            value: s.kv_blocks_cached as f64,
            counter: false,
        },
        Gauge {
            name: "kiln_prefix_cache_queried_tokens_total",
            help: "Prompt tokens looked up in the prefix cache (full blocks of admitted prompts).",
            value: s.prefix_queried_tokens as f64,
            counter: true,
        },
        Gauge {
            name: "kiln_prefix_cache_hit_tokens_total",
            help: "Prompt tokens found in the prefix cache, not computed again.",
            value: s.prefix_hit_tokens as f64,
            counter: true,
        },
        Gauge {
            name: "kiln_prefix_cache_evictions_total",
            help: "Cached KV blocks given to new data because the pool needed them.",
            value: s.prefix_evictions as f64,
            counter: true,
        },
        Gauge {
            name: "kiln_host_blocks_cached",
            help: "KV blocks the prefix cache keeps in the backend's host tier.",
            value: s.host_blocks_cached as f64,
            counter: false,
        },
        Gauge {
            name: "kiln_prefix_cache_host_saves_total",
            help: "Cached KV blocks copied to the host tier when the pool needed them.",
            value: s.prefix_host_saves as f64,
            counter: true,
        },
        Gauge {
            name: "kiln_prefix_cache_host_hit_tokens_total",
            help: "Prompt tokens copied back from the host tier instead of computed.",
            value: s.prefix_host_hit_tokens as f64,
            counter: true,
        },
        Gauge {
            name: "kiln_draft_proposed_tokens_total",
            help: "Drafted tokens sent to the target for verification.",
            value: s.draft_proposed as f64,
            counter: true,
        },
        Gauge {
            name: "kiln_draft_accepted_tokens_total",
            help: "Drafted tokens the target kept.",
            value: s.draft_accepted as f64,
            counter: true,
        },
        Gauge {
            name: "kiln_draft_mean_accepted_length",
            help: "Drafted tokens kept per verify step, since the start.",
            value: if s.draft_verify_steps == 0 {
                0.0
            } else {
                s.draft_accepted as f64 / s.draft_verify_steps as f64
            },
            counter: false,
        },
        Gauge {
            name: "kiln_engine_steps_total",
            help: "Engine steps run (each one forward pass over every scheduled sequence).",
            value: s.steps as f64,
            counter: true,
        },
        Gauge {
            name: "kiln_engine_forward_seconds_total",
            help: "Seconds the engine spent in the backend's forward passes.",
            value: s.forward_seconds,
            counter: true,
        },
        Gauge {
            name: "kiln_engine_step_seconds_total",
            help: "Seconds the engine spent in whole steps (schedule, forward, sample, hand out tokens).",
            value: s.step_seconds,
            counter: true,
        },
    ];
    let mut text = st.metrics.render(&gauges);
    text.push_str(&crate::metrics::render_step_timings(
        &st.engine.step_timings(),
    ));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::route_not_found(method.as_str(), uri.path())
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}
