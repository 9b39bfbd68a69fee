//! `kiln bench`, `kiln serve` and `kiln generate` sizing and defaults, run as a user would: the
//! default cases fit the model's context (those above it left out with a note, an explicit one
//! refused), a run that does not fit in memory is refused with the numbers before anything is
//! allocated (the free-memory figure injected through KILN_FREE_MEMORY_GB), `--dtype` is
//! honest about what each backend computes in, and the shipped model's sampling defaults apply.

use crate::support::{kiln, kiln_env, text};

/// The (test, tokens, streams) of each row of a `--json` file.
fn cases(path: &std::path::Path) -> Vec<(String, u64, u64)> {
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    j["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["test"].as_str().unwrap().to_string(),
                r["tokens"].as_u64().unwrap(),
                r["concurrency"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn bench_defaults_fit_the_models_context() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("kiln-bench-defaults");
    std::fs::create_dir_all(&dir).unwrap();
    // dummy:tiny (4096 tokens): the default depth 8192 is left out, depth 0 stays.
    let json = dir.join("tiny.json");
    let args = [
        "bench",
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--prefill",
        "128",
        "--decode",
        "16",
        "--concurrency",
        "1,2",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--json",
        json.to_str().unwrap(),
    ];
    let out = kiln(&args);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("note: default --depth 8192 left out"), "{err}");
    let want = [("prefill", 128, 1), ("decode", 0, 1), ("decode", 0, 2)];
    assert_eq!(
        cases(&json),
        want.map(|(t, n, c)| (t.to_string(), n, c)).to_vec()
    );
    // Asked for explicitly, a depth past the context is an error that names both numbers.
    let out = kiln(&[
        "bench",
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--prefill",
        "none",
        "--depth",
        "8192",
        "--decode",
        "16",
    ]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("8208") && err.contains("4096") && err.contains("--depth"),
        "{err}"
    );

    // The default model (kiln-4m, 1024 tokens) with no case given: every default prompt length
    // is longer than its context, so the context's own length stands in.
    let json = dir.join("default.json");
    let out = kiln(&[
        "bench",
        "--device",
        "cpu",
        "--decode",
        "8",
        "--concurrency",
        "1",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("--prefill 1024 instead"), "{err}");
    let want = [("prefill", 1024, 1), ("decode", 0, 1)];
    assert_eq!(
        cases(&json),
        want.map(|(t, n, c)| (t.to_string(), n, c)).to_vec()
    );
}

#[test]
fn a_run_too_big_for_the_memory_is_refused_before_anything_is_allocated() {
    let small = [("KILN_FREE_MEMORY_GB", "0.5")];
    let args = [
        "bench",
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--prefill",
        "none",
        "--decode",
        "16",
        "--depth",
        "3000",
        "--concurrency",
        "1,128",
    ];
    let out = kiln_env(&args, &small);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("128 streams x 3,016 tokens need 756 MiB of KV cache")
            && err.contains("free on the host")
            && err.contains("lower --concurrency or --depth"),
        "{err}"
    );
    assert!(
        err.contains("KILN_FREE_MEMORY_GB") || err.contains("host memory"),
        "{err}"
    );
    // The same run with the streams that fit goes through.
    let ok = kiln_env(
        &[
            "bench",
            "--model",
            "dummy:tiny",
            "--device",
            "cpu",
            "--prefill",
            "none",
            "--decode",
            "4",
            "--depth",
            "64",
            "--concurrency",
            "2",
            "--repeats",
            "1",
            "--warmup",
            "0",
        ],
        &small,
    );
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    // Weights that alone do not fit are named as such.
    let out = kiln_env(
        &[
            "generate",
            "--model",
            "dummy:llama3-1b",
            "--device",
            "cpu",
            "-p",
            "x",
            "-n",
            "1",
        ],
        &small,
    );
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("the weights (") && err.contains("smaller"),
        "{err}"
    );
    // kiln serve sizes its KV pool the same way, before it loads anything.
    let out = kiln_env(
        &[
            "serve",
            "--model",
            "dummy:tiny",
            "--device",
            "cpu",
            "--port",
            "0",
            "--kv-blocks",
            "100000",
        ],
        &small,
    );
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("1 stream x 1,600,000 tokens need") && err.contains("lower --kv-blocks"),
        "{err}"
    );
    let bad = kiln_env(
        &[
            "bench",
            "--model",
            "dummy:tiny",
            "--device",
            "cpu",
            "--prefill",
            "16",
            "--decode",
            "0",
        ],
        &[("KILN_FREE_MEMORY_GB", "lots")],
    );
    assert!(text(&bad.stderr).contains("KILN_FREE_MEMORY_GB=lots is not a size in GiB"));
}

#[test]
fn dtype_names_what_each_backend_computes_in() {
    let f32_cpu = kiln(&[
        "generate",
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--dtype",
        "f32",
        "-p",
        "x",
        "-n",
        "2",
        "--ignore-eos",
    ]);
    assert!(f32_cpu.status.success(), "{}", text(&f32_cpu.stderr));
    let bf16_cpu = kiln(&[
        "generate",
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--dtype",
        "bf16",
        "-p",
        "x",
        "-n",
        "2",
    ]);
    let err = text(&bf16_cpu.stderr);
    assert!(!bf16_cpu.status.success());
    assert!(
        err.contains("computes in f32") && err.contains("--device cuda"),
        "{err}"
    );
    let bench = kiln(&[
        "bench",
        "--model",
        "dummy:tiny",
        "--device",
        "cpu",
        "--dtype",
        "f16",
        "--prefill",
        "16",
        "--decode",
        "0",
    ]);
    assert!(!bench.status.success());
}

#[test]
fn the_shipped_models_sampling_defaults_apply_unless_ignored() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "-p",
            "A file descriptor is",
            "-n",
            "40",
            "--json",
        ];
        args.extend(extra);
        let out = kiln(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["text"].as_str().unwrap().to_string(), text(&out.stderr))
    };
    let (default, note) = run(&[]);
    assert!(
        note.contains("repetition_penalty 1.3 from the model's GGUF general.sampling.*"),
        "{note}"
    );
    // The model's settings are greedy with a penalty of 1.3: the same as asking for them.
    let (explicit, _) = run(&["--temperature", "0", "--repetition-penalty", "1.3"]);
    assert_eq!(default, explicit);
    let (plain, quiet) = run(&["--ignore-generation-config"]);
    assert!(!quiet.contains("sampling:"), "{quiet}");
    assert_ne!(default, plain);
    // Plain greedy decoding loops on this model; its defaults do not repeat a sentence.
    let repeats = |t: &str| {
        let lines: Vec<&str> = t.lines().filter(|l| l.len() > 20).collect();
        lines
            .iter()
            .enumerate()
            .any(|(i, l)| lines[..i].contains(l))
    };
    assert!(repeats(&plain), "{plain}");
    assert!(!repeats(&default), "{default}");
}
