"""A tiny random DiffusionGemma (the real architecture, a few layers and experts) for tests and
demos, saved with a tokenizer so ``from_pretrained(dir)`` and ``dreads sim --model dir`` work
offline.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

from app.engine import DEFAULT_CANVAS

__all__ = ["IMAGE_TOKENS", "TINY_CANVAS", "build_tiny_model", "make_tiny_dir", "tiny_config"]

TINY_CANVAS = DEFAULT_CANVAS  #: the served canvas of the tiny model
#: Gemma 4's image tokens (begin of image, each soft token, end of image), given to the tiny
#: model's tokenizer when it has none
IMAGE_TOKENS = ("<|image>", "<|image|>", "<image|>")
_VOCAB_MULTIPLE = 64


def tiny_config(vocab_size: int, *, canvas_length: int = TINY_CANVAS,
                sliding_window: int = 16, layers: int = 2,
                image_ids: tuple[int, int, int] | None = None) -> DiffusionGemmaConfig:
    """The research note's tiny config: hidden 64, 4 experts top-2, one full layer in
    ``layers``; a one-layer vision tower whose image tokens attend both ways as the full
    model's do (``use_bidirectional_attention="vision"``). ``image_ids``: its begin-of-image,
    image (soft token) and end-of-image ids; default the last three of the vocabulary."""
    layer_types = ["sliding_attention"] * (layers - 1) + ["full_attention"]
    text: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=32,
        num_global_key_value_heads=1, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
        sliding_window=sliding_window, layer_types=layer_types, max_position_embeddings=4096,
        pad_token_id=0, eos_token_id=[1, 106], bos_token_id=2,
        use_bidirectional_attention="vision",
    )
    vision: dict[str, Any] = dict(
        model_type="gemma4_vision", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, head_dim=16,
        position_embedding_size=256,  # patches a side: a 1:10 image at Gemma 4's 280 tokens
    )
    boi, image, eoi = image_ids or (vocab_size - 3, vocab_size - 2, vocab_size - 1)
    return DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=canvas_length,
                                boi_token_id=boi, image_token_id=image, eoi_token_id=eoi)



def rounded_vocab(n_tokens: int) -> int:
    """The tokenizer's size rounded up to a multiple of 64."""
    return -(-n_tokens // _VOCAB_MULTIPLE) * _VOCAB_MULTIPLE


def build_tiny_model(vocab_size: int, *, seed: int = 0,
                     **config: Any) -> DiffusionGemmaForBlockDiffusion:
    """A random tiny DiffusionGemma in float32, eval mode; the same seed gives the same weights."""
    torch.manual_seed(seed)
    model = DiffusionGemmaForBlockDiffusion(tiny_config(vocab_size, **config))
    return model.eval()


def make_tiny_dir(out_dir: str | Path, *, tokenizer_dir: str | Path | None = None,
                  seed: int = 0) -> Path:
    """Save a tiny model and its tokenizer (default: the bundled stand-in) to ``out_dir``; the
    tokenizer gets Gemma 4's image tokens (``IMAGE_TOKENS``) if it lacks them, and the model
    reads them as its image ids."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = Path(tokenizer_dir) if tokenizer_dir else _standin_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    missing = [t for t in IMAGE_TOKENS if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing})
    vocab = tokenizer.get_vocab()
    boi, image, eoi = (int(vocab[t]) for t in IMAGE_TOKENS)
    model = build_tiny_model(rounded_vocab(len(tokenizer)), seed=seed,
                             image_ids=(boi, image, eoi))
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    template = source / "chat_template.jinja"
    if template.exists() and not (out / "chat_template.jinja").exists():
        shutil.copy(template, out / "chat_template.jinja")
    return out


def _standin_dir() -> Path:
    from app.tokenizer.hf import standin_path

    return Path(standin_path())
