"""The byte-level BPE tokenizer kiln's shipped models use, and its chat template.

GPT-2 pre-tokenization (its regex, bytes mapped to printable characters), no normaliser, no BOS
added, ChatML special tokens at ids 0-2. llama.cpp calls this pre-tokenizer "gpt-2".
"""

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)  # ids 0, 1, 2
GGUF_PRE = "gpt-2"

# ChatML. A system message is optional; the generation prompt opens the assistant's turn.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_tokenizer(texts, vocab_size: int) -> Tokenizer:
    """Train on an iterator of strings. The result has exactly `vocab_size` tokens when the corpus
    has enough distinct merges."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    for i, s in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(s) != i:
            raise RuntimeError(f"special token {s} got id {tok.token_to_id(s)}, expected {i}")
    return tok


def tokenizer_config(model_max_length: int) -> dict:
    """tokenizer_config.json for transformers and for kiln's chat-template loader."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "bos_token": ENDOFTEXT,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for i, s in enumerate(SPECIAL_TOKENS)
        },
    }


def gguf_vocab(tok: Tokenizer) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) in GGUF's gpt2 form. Type 1 = normal, 3 = control."""
    import json

    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    tokens = [""] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    if "" in tokens:
        raise RuntimeError("tokenizer ids are not contiguous")
    types = [3 if s in SPECIAL_TOKENS else 1 for s in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges
