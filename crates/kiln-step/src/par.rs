//! Row work spread over threads when there is enough of it: sampling a large vocabulary is a
//! few hundred microseconds a row, which adds up at 64 sequences.

use std::sync::OnceLock;

/// Values below which one thread does everything (thread start-up would dominate).
pub const SERIAL_WORK: usize = 1 << 18;

/// `f` of every item, in item order; `work` (values touched in all) decides whether threads
/// are worth starting. Each result depends only on its own item.
pub fn map_rows<T: Sync, R: Send>(items: &[T], work: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = cores().min(items.len());
    if threads <= 1 || work < SERIAL_WORK {
        return items.iter().map(f).collect();
    }
    let per_thread = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(per_thread)
            .map(|group| scope.spawn(move || group.iter().map(f).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
