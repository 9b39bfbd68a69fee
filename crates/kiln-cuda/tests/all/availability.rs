//! The backend's behaviour on any machine: availability checks never panic, and without a GPU
//! the backend refuses to start with a clear error instead of crashing.

use kiln_cuda::{cuda_available, unavailable_reason, CudaBackend, CudaOptions};
use kiln_model::dummy::DummySource;

#[test]
fn availability_checks_agree_and_never_panic() {
    let available = cuda_available();
    let reason = unavailable_reason();
    eprintln!("cuda_available = {available}, reason = {reason:?}");
    if !available {
        assert!(reason.is_some(), "no device, yet no reason given");
    }
    // Asking twice gives the same answer (the driver is initialised once).
    assert_eq!(cuda_available(), available);
}

#[test]
fn backend_without_gpu_is_a_clear_error() {
    let Some(reason) = unavailable_reason() else {
        eprintln!("SKIP backend_without_gpu_is_a_clear_error: a GPU is present");
        return;
    };
    let src = DummySource::preset("tiny").expect("dummy:tiny");
    let err = CudaBackend::new(&src, CudaOptions::default(), None)
        .err()
        .expect("no GPU, yet the backend started");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("unavailable") && msg.contains(&reason),
        "unclear error: {msg}"
    );
}

#[test]
fn bad_options_are_refused_before_touching_the_device() {
    let src = DummySource::preset("tiny").expect("dummy:tiny");
    for (opts, what) in [
        (
            CudaOptions {
                block_size: 8,
                ..CudaOptions::default()
            },
            "block size",
        ),
        (
            CudaOptions {
                max_seqs: 0,
                ..CudaOptions::default()
            },
            "max_seqs",
        ),
    ] {
        let err = CudaBackend::new(&src, opts, None)
            .err()
            .expect("bad options accepted");
        assert!(
            format!("{err:#}").contains(what),
            "error for bad {what}: {err:#}"
        );
    }
}
