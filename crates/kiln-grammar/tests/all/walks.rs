//! Random walks through constraints: at every step a token is drawn from the allowed set alone,
//! so whatever the walk produces is what the grammar lets through. Every finished walk must be
//! valid (checked with a JSON-schema validator, or the regex), on a byte-level vocabulary and on
//! the shipped model's BPE vocabulary.

use crate::json_schema;
use kiln_grammar::{Grammar, TokenSpace};
use kiln_tokenizer::Tokenizer;
use serde_json::{json, Value};

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn shipped_tokenizer() -> Tokenizer {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/kiln-4m/hf");
    Tokenizer::from_hf_dir(&dir).expect("the shipped model's tokenizer")
}

/// One walk: tokens drawn uniformly from the allowed set (an end-of-turn id whenever allowed,
/// with probability 1/2, so that walks end). Returns the text, or None if it ran out of steps.
fn walk(space: &TokenSpace, tok: &Tokenizer, grammar: &Grammar, seed: u64) -> Option<String> {
    let mut c = space.compile(grammar).expect("compiles");
    let mut rng = seed;
    let mut ids = Vec::new();
    for _ in 0..400 {
        if c.is_finished() {
            return Some(tok.decode(&ids, true));
        }
        let allowed = c.allowed().expect("never a dead end");
        let may_end = tok.eos_ids().iter().any(|&e| allowed.contains(e));
        if may_end && (splitmix(&mut rng).is_multiple_of(2) || allowed.count() == 1) {
            return Some(tok.decode(&ids, true));
        }
        let choices: Vec<u32> = (0..allowed.len() as u32)
            .filter(|&t| allowed.contains(t) && !tok.eos_ids().contains(&t))
            .collect();
        let t = choices[(splitmix(&mut rng) % choices.len() as u64) as usize];
        c.commit(t).expect("an allowed token is taken");
        ids.push(t);
    }
    None
}

fn schemas() -> Vec<Value> {
    vec![
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 12},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "address": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "maxLength": 10},
                        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                    },
                    "required": ["city", "zip"],
                    "additionalProperties": false
                }
            },
            "required": ["name", "age", "address"],
            "additionalProperties": false
        }),
        json!({
            "type": "object",
            "properties": {
                "colour": {"enum": ["red", "green", "blue"]},
                "ok": {"type": "boolean"},
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "maxLength": 6},
                    "minItems": 1,
                    "maxItems": 3
                }
            },
            "required": ["colour", "ok", "tags"],
            "additionalProperties": false
        }),
        json!({
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "x": {"type": "number", "minimum": -100, "maximum": 100},
                    "y": {"type": "integer", "minimum": 0, "maximum": 9999}
                },
                "required": ["x", "y"],
                "additionalProperties": false
            },
            "minItems": 2,
            "maxItems": 4
        }),
    ]
}

fn check_schemas(tok: &Tokenizer, vocab: usize) {
    let space = TokenSpace::new(tok, vocab).unwrap();
    for schema in schemas() {
        let grammar = Grammar::JsonSchema(schema.clone());
        let mut finished = 0;
        for seed in 0..50 {
            let Some(text) = walk(&space, tok, &grammar, seed) else {
                continue;
            };
            finished += 1;
            let value: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
            if let Err(e) = json_schema::check(&schema, &value) {
                panic!("{text} breaks {schema}: {e}");
            }
        }
        assert!(
            finished >= 40,
            "only {finished} of 50 walks ended for {schema}"
        );
    }
}

#[test]
fn json_schema_walks_validate_on_bytes() {
    check_schemas(&Tokenizer::byte_level(300), 300);
}

#[test]
fn json_schema_walks_validate_on_the_shipped_vocabulary() {
    let tok = shipped_tokenizer();
    let v = tok.vocab_size();
    check_schemas(&tok, v + 7);
}

#[test]
fn json_object_regex_and_lark_walks() {
    let tok = shipped_tokenizer();
    let space = TokenSpace::new(&tok, tok.vocab_size()).unwrap();
    let mut n = 0;
    for seed in 0..30 {
        if let Some(text) = walk(&space, &tok, &Grammar::JsonObject, seed) {
            // Syntax only: a walk writes numbers far past f64's range, which is still JSON.
            serde_json::from_str::<serde::de::IgnoredAny>(&text)
                .unwrap_or_else(|e| panic!("{e}: {text:?}"));
            assert!(text.starts_with('{') && text.ends_with('}'), "{text}");
            n += 1;
        }
    }
    // Unbounded strings make many walks long; the ones that end are what is checked.
    assert!(n >= 5, "{n} json_object walks ended");
    let rx = Grammar::Regex("[a-c]{2,4}-(yes|no)".into());
    let lark = Grammar::Lark("start: \"(\" num (\",\" num)* \")\"\nnum: /[0-9]{1,3}/".into());
    for seed in 0..30 {
        let text = walk(&space, &tok, &rx, seed).expect("short regex walks end");
        let (head, tail) = text.split_once('-').unwrap();
        assert!((2..=4).contains(&head.len()) && head.chars().all(|c| "abc".contains(c)));
        assert!(tail == "yes" || tail == "no", "{text}");
        if let Some(text) = walk(&space, &tok, &lark, seed) {
            let inner = text.strip_prefix('(').and_then(|t| t.strip_suffix(')'));
            let inner = inner.unwrap_or_else(|| panic!("{text}"));
            assert!(
                inner
                    .split(',')
                    .all(|x| (1..=3).contains(&x.len()) && x.chars().all(|c| c.is_ascii_digit())),
                "{text}"
            );
        }
    }
}

#[test]
fn bad_grammars_are_errors_that_say_why() {
    let tok = Tokenizer::byte_level(300);
    let space = TokenSpace::new(&tok, 300).unwrap();
    for g in [
        Grammar::JsonSchema(json!({"type": "nonsense"})),
        Grammar::Regex("(unclosed".into()),
        Grammar::Lark("start: missing_rule".into()),
    ] {
        let e = space.compile(&g).expect_err("must not compile");
        assert!(!e.0.is_empty(), "{g:?}");
    }
}

#[test]
fn drafts_are_judged_without_moving_the_grammar() {
    let tok = Tokenizer::byte_level(300);
    let space = TokenSpace::new(&tok, 300).unwrap();
    let mut c = space.compile(&Grammar::Regex("ab(c|d)e".into())).unwrap();
    let ids = |s: &str| s.bytes().map(u32::from).collect::<Vec<_>>();
    assert_eq!(c.valid_prefix(&ids("abxe")), 2);
    assert_eq!(c.valid_prefix(&ids("abde")), 4);
    let rows = c.allowed_along(&ids("abd"), 4);
    let only = |r: &Result<kiln_step::TokenSet, String>, b: u8| {
        let s = r.as_ref().unwrap();
        s.contains(b as u32) && s.count() == 1
    };
    assert!(only(&rows[0], b'a') && only(&rows[1], b'b') && only(&rows[3], b'e'));
    let r2 = rows[2].as_ref().unwrap();
    assert!(r2.contains(b'c' as u32) && r2.contains(b'd' as u32) && r2.count() == 2);
    // Nothing was taken: the first row is still 'a', and a refused draft cuts the rows.
    let again = c.allowed_along(&ids("xb"), 3);
    assert!(only(&again[0], b'a') && again[1].is_err() && again[2].is_err());
    for b in ids("abce") {
        assert!(!c.is_finished());
        c.commit(b).unwrap();
    }
    assert!(c.is_finished());
    assert!(c.commit(b'a' as u32).is_err());
}

/// The validator the walks are checked with refuses each kind of break it is asked to see.
#[test]
fn the_schema_check_refuses_what_breaks_each_keyword() {
    let schema = &schemas()[0];
    let good = json!({"name": "Ada", "age": 36, "address": {"city": "Oslo", "zip": "01234"}});
    json_schema::check(schema, &good).unwrap();
    let mut broken = Vec::new();
    let mut with = |path: &[&str], v: Value| {
        let mut x = good.clone();
        let (last, inner) = path.split_last().unwrap();
        let target = inner.iter().fold(&mut x, |x, k| &mut x[*k]);
        if v.is_null() {
            target.as_object_mut().unwrap().remove(*last);
        } else {
            target[*last] = v;
        }
        broken.push(x);
    };
    with(&["age"], json!(36.5)); // type integer
    with(&["age"], json!("36")); // type
    with(&["age"], json!(-1)); // minimum
    with(&["address", "zip"], json!("1234")); // pattern
    with(&["address", "city"], json!("Llanfairpwll")); // maxLength
    with(&["address", "zip"], Value::Null); // required
    with(&["extra"], json!(1)); // additionalProperties
    for x in &broken {
        assert!(json_schema::check(schema, x).is_err(), "{x} passed");
    }
    let schema = &schemas()[1];
    let good = json!({"colour": "red", "ok": true, "tags": ["a"]});
    json_schema::check(schema, &good).unwrap();
    for x in [
        json!({"colour": "pink", "ok": true, "tags": ["a"]}), // enum
        json!({"colour": "red", "ok": true, "tags": []}),     // minItems
        json!({"colour": "red", "ok": true, "tags": ["a", "b", "c", "d"]}), // maxItems
        json!({"colour": "red", "ok": true, "tags": ["abcdefg"]}), // items' maxLength
    ] {
        assert!(json_schema::check(schema, &x).is_err(), "{x} passed");
    }
}
