//! Shared by the speed examples.

/// CPU time of all threads of this process, in seconds: with other work on the machine,
/// wall time alone understates the speed.
pub fn cpu_seconds() -> f64 {
    let mut ns = 0u64;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
    ns as f64 * 1e-9
}
