//! The bounded pool where request bodies become prompts: JSON parsing, chat templates and
//! tokenisation run here, never on the async workers that answer `/health` and move other
//! clients' tokens. At most `threads` jobs run at once; a job waits for a free thread, and when
//! `queue` jobs already wait, the request is answered 429 instead of piling up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::error::ApiError;

/// Bodies from this size on leave enough freed memory behind to be worth returning.
const LARGE_BODY: usize = 1 << 20;

/// glibc keeps freed memory in per-thread arenas; after a multi-megabyte body that would leave
/// the process larger for good.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the OS; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub struct PromptPool {
    running: Arc<Semaphore>,
    waiting: AtomicUsize,
    queue: usize,
}

/// Counts a waiting job for as long as it waits, even if its request is dropped meanwhile.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PromptPool {
    pub fn new(threads: usize, queue: usize) -> PromptPool {
        PromptPool {
            running: Arc::new(Semaphore::new(threads.max(1))),
            waiting: AtomicUsize::new(0),
            queue,
        }
    }

    /// Runs `job` on a pool thread and returns what it returns. The thread is held until the job
    /// ends, even if the caller stops waiting (a closed connection cannot free a busy thread).
    /// `body_bytes` is the size of the body the job consumes: after a large one, the memory it
    /// freed is handed back to the OS.
    pub async fn run<T, F>(&self, body_bytes: usize, job: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    {
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::queue_full(
                "Too many requests are waiting to be tokenized; retry later.",
            ));
        }
        let waiting = Waiting(&self.waiting);
        let permit = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::unavailable("The server is shutting down."))?;
        drop(waiting);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let out = job();
            if body_bytes >= LARGE_BODY {
                give_back_freed_memory();
            }
            out
        })
        .await
        .map_err(|e| {
            tracing::error!("a prompt job failed: {e}");
            ApiError::internal("Internal error while preparing the prompt.")
        })?
    }

    /// Jobs waiting for a thread now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn jobs_run_off_the_caller_and_a_full_queue_is_429() {
        let pool = Arc::new(PromptPool::new(1, 1));
        let caller = std::thread::current().id();
        let ran_on = pool
            .run(0, || Ok(std::thread::current().id()))
            .await
            .unwrap();
        assert_ne!(ran_on, caller);
        // One job holds the thread, one waits; a third is refused.
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let busy = tokio::spawn({
            let pool = pool.clone();
            async move {
                pool.run(0, move || {
                    let _ = hold.recv();
                    Ok(1)
                })
                .await
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let queued = tokio::spawn({
            let pool = pool.clone();
            async move { pool.run(0, || Ok(2)).await }
        });
        while pool.waiting() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let e = pool.run(0, || Ok(3)).await.unwrap_err();
        assert_eq!(e.status.as_u16(), 429);
        release.send(()).unwrap();
        assert_eq!(busy.await.unwrap().unwrap(), 1);
        assert_eq!(queued.await.unwrap().unwrap(), 2);
        assert_eq!(pool.waiting(), 0);
    }
}
