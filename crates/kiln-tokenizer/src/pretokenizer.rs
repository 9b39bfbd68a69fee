//! The word-splitting regexes of byte-level BPE vocabularies, by the name GGUF files give in
//! `tokenizer.ggml.pre`. Each list is applied in order, every match and every gap between
//! matches becoming its own piece (Hugging Face's `Split` with `Isolated`). Where a model's
//! tokenizer.json regex is known it is used verbatim; the table follows llama.cpp's
//! `llm_tokenizer_bpe` for which names share which rules. Non-ASCII characters are written as
//! `\x{..}` escapes: some (U+1F7D, U+1FD3, U+1FDB) would otherwise be changed by Unicode
//! normalisation in an editor and the class ranges would stop compiling.

/// How one family of vocabularies splits text into words before merging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreTokenizer {
    /// Canonical family name, used in [`crate::Tokenizer::kind`].
    pub family: &'static str,
    pub regexes: &'static [&'static str],
    /// A whole word already in the vocabulary is emitted as is, without merging (Llama 3).
    pub ignore_merges: bool,
}

const GPT2: &[&str] =
    &[r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"];

const LLAMA3: &[&str] = &[
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

const QWEN2: &[&str] = &[
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

const QWEN35: &[&str] = &[
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

const DEFAULT: &[&str] = &[
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
];

const DEEPSEEK_LLM: &[&str] = &[
    r"[\r\n]",
    r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+",
    r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
    r"\s+$",
    r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
    r"\p{N}+",
];

const DEEPSEEK_CODER: &[&str] = &[
    r"[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
    r"\p{N}",
];

const DEEPSEEK3: &[&str] = &[
    r"\p{N}{1,3}",
    r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
    r"[!\x22#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

const FALCON: &[&str] = &[
    r"[\p{P}\$\+<=>\^~\|`]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"[0-9][0-9][0-9]",
];

const STARCODER: &[&str] = &[
    r"\p{N}",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
];

const BLOOM: &[&str] = &[r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+"];

const VIKING: &[&str] = &[
    r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+",
    r"\p{N}",
];

const CHATGLM4: &[&str] = &[
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

const TEKKEN: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

const GPT4O: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

const SEED_CODER: &[&str] = &[
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
];

const BAILINGMOE: &[&str] = &[
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
];

fn spec(
    family: &'static str,
    regexes: &'static [&'static str],
    ignore_merges: bool,
) -> PreTokenizer {
    PreTokenizer {
        family,
        regexes,
        ignore_merges,
    }
}

/// The pre-tokenizer a GGUF `tokenizer.ggml.pre` name stands for; None for names kiln lacks.
pub fn by_name(name: &str) -> Option<PreTokenizer> {
    Some(match name {
        "default" => spec("default", DEFAULT, false),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => spec("llama-bpe", LLAMA3, true),
        "dbrx" | "smaug-bpe" => spec("dbrx", LLAMA3, false),
        "deepseek-llm" => spec("deepseek-llm", DEEPSEEK_LLM, false),
        "deepseek-coder" => spec("deepseek-coder", DEEPSEEK_CODER, false),
        "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => {
            spec("deepseek-v3", DEEPSEEK3, false)
        }
        "falcon" => spec("falcon", FALCON, false),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais" | "trillion"
        | "granite-docling" | "exaone4" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => {
            spec("gpt-2", GPT2, false)
        }
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
        | "mellum2" => spec("starcoder", STARCODER, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "megrez" | "hunyuan"
        | "solar-open" | "grok-2" => spec("qwen2", QWEN2, false),
        "qwen35" => spec("qwen35", QWEN35, false),
        "poro-chat" | "bloom" | "gpt3-finnish" => spec("bloom", BLOOM, false),
        "viking" => spec("viking", VIKING, false),
        "chatglm-bpe" => spec("chatglm-bpe", CHATGLM4, false),
        "glm4" | "glm5" => spec("glm4", CHATGLM4, true),
        "tekken" => spec("tekken", TEKKEN, true),
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => spec("gpt-4o", GPT4O, false),
        "seed-coder" => spec("seed-coder", SEED_CODER, false),
        "bailingmoe" | "bailingmoe2" | "llada-moe" => spec("bailingmoe", BAILINGMOE, false),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::SplitDelimiterBehavior;

    #[test]
    fn every_regex_in_the_table_compiles() {
        let names = [
            "default",
            "llama-bpe",
            "dbrx",
            "deepseek-llm",
            "deepseek-coder",
            "deepseek-v3",
            "falcon",
            "gpt-2",
            "starcoder",
            "qwen2",
            "qwen35",
            "bloom",
            "viking",
            "chatglm-bpe",
            "glm4",
            "tekken",
            "gpt-4o",
            "seed-coder",
            "bailingmoe",
        ];
        for n in names {
            let p = by_name(n).unwrap_or_else(|| panic!("{n} missing"));
            for r in p.regexes {
                Split::new(
                    SplitPattern::Regex(r.to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap_or_else(|e| panic!("{n}: {r}: {e}"));
            }
        }
        assert!(by_name("no-such-pre").is_none());
    }
}
