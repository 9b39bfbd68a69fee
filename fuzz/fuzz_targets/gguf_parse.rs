//! Feeds arbitrary bytes to the GGUF parser. Parsing may fail, but must never panic, read out of
//! bounds or allocate without limit; a file that parses must be fully readable.
#![no_main]

use kiln_formats::{to_f32, GgufFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let _ = g.architecture();
    for (key, _) in &g.metadata {
        let _ = g.get_str(key);
        let _ = g.get_u64(key);
        let _ = g.get_f64(key);
        let _ = g.get_bool(key);
        let _ = g.get_str_array(key);
        let _ = g.get_f32_array(key);
        let _ = g.get_i64_array(key);
    }
    for info in &g.tensors {
        let view = g.tensor(&info.name).expect("a listed tensor must be readable");
        assert_eq!(view.data.len(), info.n_bytes);
        assert!(info.offset >= g.data_offset && info.offset + info.n_bytes <= g.file_size());
        // Dequantise small tensors: the value count is bounded by the bytes the file holds.
        if view.n_elements() <= 1 << 20 {
            let _ = to_f32(&view);
        }
    }
});
