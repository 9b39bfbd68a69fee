//! Where the tests find the vocabularies (vocab/) and chat templates (templates/) of the
//! llama-cpp-python sdist: `$KILN_TEST_DATA`, else `../shared` beside the checkout, else the
//! cache that scripts/fetch-test-data.py fills (scripts/test.sh runs it when ../shared is
//! absent). Included by the tests that need them with `#[path]`.
#![allow(dead_code)] // each test crate uses a different subset

use std::path::{Path, PathBuf};

/// The sdist version scripts/fetch-test-data.py fetches.
const SDIST: &str = "llama-cpp-python-0.3.36";

/// The folder holding vocab/ and templates/; panics with what to run when none has them.
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KILN_TEST_DATA").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    if beside.join("vocab").is_dir() {
        return beside;
    }
    if let Some(home) = std::env::var_os("HOME") {
        let cache = Path::new(&home).join(".cache/kiln-test-data").join(SDIST);
        if cache.join("vocab").is_dir() {
            return cache;
        }
    }
    panic!(
        "no test data: neither $KILN_TEST_DATA nor ../shared beside the checkout nor \
         ~/.cache/kiln-test-data/{SDIST} holds vocab/; run `python3 scripts/fetch-test-data.py` \
         (scripts/test.sh does it for you)"
    )
}

pub fn vocab_dir() -> PathBuf {
    dir().join("vocab")
}

pub fn templates_dir() -> PathBuf {
    dir().join("templates")
}

/// `vocab/ggml-vocab-NAME.gguf`.
pub fn vocab(name: &str) -> PathBuf {
    vocab_dir().join(format!("ggml-vocab-{name}.gguf"))
}
