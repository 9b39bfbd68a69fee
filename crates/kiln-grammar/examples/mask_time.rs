//! How long a grammar's mask takes on a real vocabulary: random walks through each grammar
//! (every token drawn from the allowed set), each `allowed()` call timed.
//! Usage: mask_time VOCAB.gguf [WALKS]   (a vocab-only GGUF is enough)

use std::time::Instant;

use kiln_grammar::{Grammar, TokenSpace};
use kiln_tokenizer::Tokenizer;
use serde_json::json;

fn grammars() -> Vec<(&'static str, Grammar)> {
    vec![
        ("json_object", Grammar::JsonObject),
        (
            "nested schema",
            Grammar::JsonSchema(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 40},
                    "age": {"type": "integer", "minimum": 0, "maximum": 150},
                    "email": {"type": "string", "format": "email"},
                    "address": {"type": "object", "properties": {
                        "street": {"type": "string"}, "city": {"type": "string"},
                        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                        "required": ["street", "city", "zip"], "additionalProperties": false},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5}
                },
                "required": ["name", "age", "address", "tags"],
                "additionalProperties": false
            })),
        ),
        (
            "enum + bounded array",
            Grammar::JsonSchema(json!({
                "type": "object",
                "properties": {
                    "level": {"enum": ["debug", "info", "warning", "error", "critical"]},
                    "codes": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 8}
                },
                "required": ["level", "codes"],
                "additionalProperties": false
            })),
        ),
        (
            "regex",
            Grammar::Regex("[A-Z][a-z]{2,12}( [a-z]{1,10}){3,12}\\.".into()),
        ),
    ]
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: mask_time VOCAB.gguf [WALKS]"))?;
    let walks: u64 = args.next().map_or(Ok(20), |w| w.parse())?;
    let gguf = kiln_formats::GgufFile::open(std::path::Path::new(&path))?;
    let tok = Tokenizer::from_gguf(&gguf)?;
    let t = Instant::now();
    let space = TokenSpace::new(&tok, tok.vocab_size())?;
    println!(
        "{path}: {} tokens, token space built in {:.0} ms",
        tok.vocab_size(),
        t.elapsed().as_secs_f64() * 1e3
    );
    println!("| grammar | compile ms | masks | mask us median | p90 | max | tokens per walk |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, g) in grammars() {
        let t = Instant::now();
        let proto = space
            .compile(&g)
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let (mut times, mut lengths) = (Vec::new(), Vec::new());
        for w in 0..walks {
            let mut c = proto.clone();
            let mut rng = w;
            let mut n = 0;
            while n < 300 && !c.is_finished() {
                let t = Instant::now();
                let allowed = c.allowed().map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
                times.push(t.elapsed().as_secs_f64() * 1e6);
                let ids: Vec<u32> = (0..allowed.len() as u32)
                    .filter(|&i| allowed.contains(i) && !tok.eos_ids().contains(&i))
                    .collect();
                if ids.is_empty() {
                    break;
                }
                c.commit(ids[(splitmix(&mut rng) % ids.len() as u64) as usize])
                    .map_err(|e| anyhow::anyhow!(e))?;
                n += 1;
            }
            lengths.push(n as f64);
        }
        times.sort_by(f64::total_cmp);
        let q = |f: f64| times[((times.len() - 1) as f64 * f) as usize];
        println!(
            "| {name} | {compile_ms:.1} | {} | {:.1} | {:.1} | {:.1} | {:.0} |",
            times.len(),
            q(0.5),
            q(0.9),
            times[times.len() - 1],
            lengths.iter().sum::<f64>() / lengths.len() as f64
        );
    }
    Ok(())
}
