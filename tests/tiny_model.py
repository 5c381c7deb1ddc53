"""A tiny Qwen3ForCausalLM model directory for vLLM's `--load-format dummy` (the real-server tests).

config.json (2 layers, hidden 256, head_dim 64, 4 query / 2 KV heads, vocab 1024),
generation_config.json, and a WordLevel tokenizer built with the `tokenizers` library from a
small in-file corpus (tokenizer.json, tokenizer_config.json with a chat template,
special_tokens_map.json). No weights: vLLM fills them with dummy values, so its output repeats
one or two tokens.

The vocabulary is padded with filler tokens to exactly the model's vocab size, so every id the
(random) model emits decodes to some text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

CORPUS = """
The quick brown fox jumps over the lazy dog. A tiny model serves requests on a small CPU.
vLLM runs an OpenAI compatible server with speculative decoding and prefix caching.
Speculative decoding proposes draft tokens and the target model verifies them in one step.
The ngram proposer looks up the last tokens of the prompt and copies what followed them.
Prefix caching keeps the key value blocks of a shared prompt prefix and reuses them.
def add(a, b): return a + b
for i in range(10): print(i)
Hello world! How are you today? I am fine, thank you. What is the answer? The answer is 42.
one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
red green blue yellow black white orange purple brown pink grey silver gold
system user assistant tool message content role name
"""

VOCAB = 1024
LAYERS = 2
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }} {{ message['content'] }} <|im_end|> "
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


def build_tokenizer(vocab_size: int) -> Tokenizer:
    words: list[str] = []
    for w in re.findall(r"\w+|[^\w\s]", CORPUS):
        if w not in words:
            words.append(w)
    vocab: dict[str, int] = {}
    for tok in SPECIALS + words:
        vocab.setdefault(tok, len(vocab))
    i = 0
    while len(vocab) < vocab_size:  # filler so that every model id decodes
        vocab.setdefault(f"w{i:04d}", len(vocab))
        i += 1
    if len(vocab) > vocab_size:
        raise SystemExit(f"corpus needs {len(vocab)} ids > vocab {vocab_size}")
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # \w+|[^\w\s]+
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)  # joins with spaces
    tok.add_special_tokens(SPECIALS)
    return tok


def tiny_config(ids: dict[str, int], vocab: int = VOCAB, layers: int = LAYERS) -> dict:
    """The model's config.json (``ids``: the tokenizer's ids of SPECIALS); tests/recipes/cpu-tiny's
    configs/target.config.json is this one."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": ids["<s>"],
        "eos_token_id": ids["</s>"],
        "pad_token_id": ids["<pad>"],
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.0",
    }


def write_tiny_model(out: Path, vocab: int = VOCAB, layers: int = LAYERS) -> Path:
    """Write the model directory ``out`` (created); returns it."""
    out.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer(vocab)
    tok.save(str(out / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}

    config = tiny_config(ids, vocab, layers)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps(
            {"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"], "do_sample": False},
            indent=2,
        )
        + "\n"
    )
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            },
            indent=2,
        )
        + "\n"
    )
    return out
