"""``HFTextTokenizer``: the engine's ``TextTokenizer`` over ``transformers.AutoTokenizer``.

``load_tokenizer("standin")`` loads the bundled offline stand-in
(``app/assets/standin_tokenizer``); any other name is a hub id or a local directory.
Every id the engine needs (scaffold, turn close, pad) is read from the tokenizer itself, and
so is how its chat template continues an assistant message (``reply_prefix``), which is how a
chat read carries the thought block in its prompt. A tokenizer without a chat template is
refused at once: every read is rendered with it.

Images (``image_ids``, ``render_chat(..., image_sizes=...)``): a message's content may be a list
of parts, its ``image_url`` parts first. The chat template gets them as vLLM gives them
(``chat_parts``), and each image placeholder ``<|image|>`` the prompt holds becomes the ids the
image takes: ``<|image>``, N x ``<|image|>``, ``<image|>``. N is counted by the tokenizer
source's own processor when it has one (a model directory with ``processor_config.json``), else
by Gemma 4's rule (``app.engine.image_tokens``) with the model's ``vision_config`` from its
``config.json`` (patch size, pooling, ``default_output_length``), as vLLM counts it. The three
ids are the tokenizer's tokens of those names, else DiffusionGemma's ids (255999, 258880,
258882) where the vocabulary has them.
A server-side render (the simulator, the in-process engine) passes no sizes: they are read from
the parts' data URLs, which is what dreads sends.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from app.engine.image_tokens import GEMMA4_IMAGE_IDS, ImageRule, image_prompt_ids
from app.engine.types import STANDIN, Message, TokenizerInfo
from app.errors import ConfigError, TemplateError
from app.tokenizer.chat_parts import (
    content_format,
    count_images,
    data_url_image_sizes,
    template_messages,
)

__all__ = ["HFTextTokenizer", "load_tokenizer", "standin_path"]

SCAFFOLD_OPEN = "<|channel>"
SCAFFOLD_CLOSE = "<channel|>"
SCAFFOLD_TEXT = f"{SCAFFOLD_OPEN}thought\n{SCAFFOLD_CLOSE}"
TURN_CLOSE = "<turn|>"
_PROBE_MESSAGES: tuple[Message, ...] = (
    {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
)
_SENTINEL = "\u2063dreads-prefill\u2063"
#: The image placeholder vLLM writes for DiffusionGemma (and Gemma 4) and expands in the prompt.
IMAGE_PLACEHOLDER = "<|image|>"
#: Gemma 4's image tokens: opens an image, each soft token, closes an image.
IMAGE_TOKENS = ("<|image>", IMAGE_PLACEHOLDER, "<image|>")
#: Files whose presence says a model directory has a processor (AutoProcessor loads it).
_PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


class HFTextTokenizer:
    """A Hugging Face tokenizer adapted to the engine's ``TextTokenizer`` protocol.

    Example::

        tok = load_tokenizer("standin")
        tok.encode("q0: yes")          # [391, 365, 442, 461]
        tok.info.turn_close_id         # 106
    """

    info: TokenizerInfo

    def __init__(self, hf_tokenizer: Any, name: str, *, source: str | None = None) -> None:
        self.hf = hf_tokenizer
        self.name = name
        self.source = source  #: where a processor may be loaded from (a model dir or hub id)
        self._backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        self._encode_cached = functools.lru_cache(maxsize=65536)(self._encode_uncached)
        self.info = self._compute_info()

    def _encode_uncached(self, text: str) -> tuple[int, ...]:
        return self._encode_text(text)

    def _encode_text(self, text: str) -> tuple[int, ...]:
        """The Rust tokenizer straight (a third of the cost of the Python wrapper's call)."""
        if self._backend is not None:
            return tuple(self._backend.encode(text, add_special_tokens=False).ids)
        return tuple(self.hf.encode(text, add_special_tokens=False))

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``, no special tokens added (special-token text is matched)."""
        return list(self._encode_cached(text))

    def chat_prompt_ids(self, messages: tuple[Message, ...], *, prefill: str = "",
                        image_sizes: Sequence[tuple[int, int]] | None = None) -> list[int]:
        """The chat template applied with thinking off, as ids: the generation prompt on, or
        with ``prefill`` an assistant message of that text continued (not closed). Each image
        part of ``messages`` takes the ids of its (width, height) in ``image_sizes`` (None:
        read from the parts' data URLs)."""
        if prefill:
            return self.render_chat([*messages, {"role": "assistant", "content": prefill}],
                                    add_generation_prompt=False, continue_final_message=True,
                                    image_sizes=image_sizes)
        return self.render_chat(messages, image_sizes=image_sizes)

    def render_chat(self, messages: Sequence[Mapping[str, Any]], *,
                    add_generation_prompt: bool = True, continue_final_message: bool = False,
                    image_sizes: Sequence[tuple[int, int]] | None = None) -> list[int]:
        """Ids of ``messages`` rendered as a server renders a chat request, thinking off: the
        template's text, then its ids (no special tokens added: the template writes them).
        Content parts reach the template as vLLM gives them; each image placeholder becomes
        ``image_ids`` of the image's (width, height) in ``image_sizes``, in order; with None,
        the sizes are read from the parts' data URLs (what dreads sends: the simulator and the
        in-process engine render request bodies so).

        Raises:
            ValueError: ``image_sizes`` does not give one size per image part, or (None) an
                image part that is not a data URL of a readable image.
            TemplateError: the rendered prompt holds more image placeholders than images (a
                state or question that writes ``<|image|>`` itself).
            ConfigError: the chat template writes no ``<|image|>`` for an image part, or the
                tokenizer has no image tokens.
        """
        n_images = count_images(messages)
        if image_sizes is None:
            image_sizes = data_url_image_sizes(messages) if n_images else []
        if n_images != len(image_sizes):
            raise ValueError(f"{n_images} image part(s) but {len(image_sizes)} image size(s)")
        text = self._render_text(messages, add_generation_prompt=add_generation_prompt,
                                 continue_final_message=continue_final_message)
        if not n_images:
            return list(self._encode_text(text))
        pieces = text.split(IMAGE_PLACEHOLDER)
        self._check_placeholders(len(pieces) - 1, n_images)
        ids = list(self._encode_text(pieces[0]))
        for (width, height), piece in zip(image_sizes, pieces[1:], strict=True):
            ids.extend(self.image_ids(width, height))
            ids.extend(self._encode_text(piece))
        return ids

    def _check_placeholders(self, found: int, n_images: int) -> None:
        if found > n_images:
            raise TemplateError(
                f"the prompt holds {found} image placeholders {IMAGE_PLACEHOLDER!r} for "
                f"{n_images} image(s): remove {IMAGE_PLACEHOLDER!r} from the state and the "
                "questions")
        if found < n_images:
            raise ConfigError(
                f"the chat template of tokenizer {self.name!r} writes {found} image "
                f"placeholder(s) {IMAGE_PLACEHOLDER!r} for {n_images} image(s), so dreads cannot "
                "place the images' tokens: pass the served model's tokenizer (--tokenizer)")

    def _render_text(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> str:
        if count_images(messages):
            fmt = content_format(str(self.hf.chat_template))
            plain = template_messages(messages, fmt, IMAGE_PLACEHOLDER)
        else:
            plain = [dict(m) for m in messages]
        return str(self.hf.apply_chat_template(plain, tokenize=False, enable_thinking=False,
                                               **options))

    # -- images ---------------------------------------------------------------------------

    def image_ids(self, width: int, height: int) -> tuple[int, ...]:
        """The ids an image of ``width`` x ``height`` pixels takes in the prompt: ``<|image>``,
        N x ``<|image|>``, ``<image|>``; N by the source's processor, else Gemma 4's rule.

        Raises:
            ConfigError: the tokenizer has no image tokens (it cannot read images).
        """
        processor = self._processor()
        if processor is not None:
            n = int(processor._get_num_multimodal_tokens(
                image_sizes=[[height, width]]).num_image_tokens[0])
            rule = self.image_rule
            return (rule.boi_id, *(rule.image_id,) * n, rule.eoi_id)
        return image_prompt_ids(width, height, self.image_rule)

    @functools.cached_property
    def image_rule(self) -> ImageRule:
        """This tokenizer's image ids, with the model's vision settings (``config.json``'s
        ``vision_config`` beside the tokenizer) or Gemma 4's defaults.

        Raises:
            ConfigError: no image tokens by name, and a vocabulary too small for DiffusionGemma's.
        """
        named = [self._token_id(token) for token in IMAGE_TOKENS]
        budget = self._vision_budget()
        if all(i is not None for i in named):
            boi, image, eoi = (int(i) for i in named if i is not None)
            return ImageRule(boi_id=boi, image_id=image, eoi_id=eoi, **budget)
        if len(self.hf) > max(GEMMA4_IMAGE_IDS):
            return ImageRule(*GEMMA4_IMAGE_IDS, **budget)
        raise ConfigError(
            f"tokenizer {self.name!r} has no image tokens ({', '.join(IMAGE_TOKENS)}), so it "
            "cannot read images: pass the served model's tokenizer (--tokenizer), or drop the "
            "images from the job file")

    def _vision_budget(self) -> dict[str, int]:
        """The model's vision settings when the source is a model directory whose
        ``config.json`` has them (vLLM counts an image's tokens from them), else {}."""
        path = Path(self.source or "") / "config.json"
        try:
            vision = json.loads(path.read_text(encoding="utf-8")).get("vision_config") or {}
        except (OSError, ValueError, AttributeError):
            return {}
        keys = {"patch_size": "patch_size", "pooling_kernel_size": "pooling",
                "default_output_length": "max_soft_tokens"}
        return {ours: int(vision[theirs]) for theirs, ours in keys.items()
                if isinstance(vision, dict) and isinstance(vision.get(theirs), int)}

    @functools.cache  # noqa: B019 (one tokenizer per source, loaded once per process)
    def _processor(self) -> Any:
        """The source's processor when it has one (``AutoProcessor``), else None."""
        if self.source is None or not self._may_have_processor(self.source):
            return None
        try:
            from transformers import AutoProcessor

            processor = AutoProcessor.from_pretrained(self.source)
        except Exception:  # no processor, or one transformers cannot load: Gemma 4's rule
            return None
        return processor if hasattr(processor, "_get_num_multimodal_tokens") else None

    @staticmethod
    def _may_have_processor(source: str) -> bool:
        path = Path(source)
        if path.is_dir():
            return any((path / name).is_file() for name in _PROCESSOR_FILES)
        return not path.exists()  # a hub id

    def _token_id(self, token: str) -> int | None:
        vocab: dict[str, int] = self.hf.get_vocab()
        return vocab.get(token)

    def _scaffold(self) -> tuple[str, tuple[int, ...]]:
        if self._token_id(SCAFFOLD_OPEN) is None or self._token_id(SCAFFOLD_CLOSE) is None:
            return "", ()
        return SCAFFOLD_TEXT, tuple(self.encode(SCAFFOLD_TEXT))

    def _scaffold_in_prompt(self, scaffold_ids: tuple[int, ...]) -> bool:
        if not scaffold_ids:
            return False
        prompt = self.chat_prompt_ids(_PROBE_MESSAGES)
        return tuple(prompt[-len(scaffold_ids):]) == scaffold_ids

    def _reply_prefix(self, scaffold_text: str) -> str | None:
        """The text the template writes after the assistant header of a generation prompt, if
        continuing an assistant message that starts with it (and goes on with the thought
        block) renders exactly the generation prompt followed by that block."""
        try:
            generation = self._render_text(_PROBE_MESSAGES, add_generation_prompt=True)
            continued = self._render_text(
                [*_PROBE_MESSAGES, {"role": "assistant", "content": _SENTINEL}],
                add_generation_prompt=False, continue_final_message=True)
        except Exception:  # a template that refuses assistant turns or continuation
            return None
        head = continued[:continued.rfind(_SENTINEL)]
        if not continued.endswith(_SENTINEL) or not generation.startswith(head):
            return None
        prefix = generation[len(head):]
        extra = scaffold_text or "x"
        try:
            ids = self.chat_prompt_ids(_PROBE_MESSAGES, prefill=prefix + extra)
        except Exception:
            return None
        expected = [*self.chat_prompt_ids(_PROBE_MESSAGES), *self.encode(extra)]
        return prefix if ids == expected else None

    def _compute_info(self) -> TokenizerInfo:
        if not getattr(self.hf, "chat_template", None):
            raise ConfigError(
                f"tokenizer {self.name!r} has no chat template, and every read is rendered "
                "with the served model's chat template: pass the served model's tokenizer "
                "(a hub id, or a directory with chat_template.jinja or a chat_template in "
                "tokenizer_config.json)")
        text, ids = self._scaffold()
        turn_close = self._token_id(TURN_CLOSE)
        if turn_close is None:
            turn_close = self.hf.eos_token_id
        pad = self.hf.pad_token_id if self.hf.pad_token_id is not None else self.hf.eos_token_id
        if turn_close is None or pad is None:
            raise ConfigError(f"tokenizer {self.name!r} has neither '<turn|>' nor an eos token "
                              "(or no pad/eos token); pass a chat model's tokenizer")
        return TokenizerInfo(
            name=self.name, vocab_size=len(self.hf), scaffold_text=text, scaffold_ids=ids,
            scaffold_in_prompt=self._scaffold_in_prompt(ids), turn_close_id=int(turn_close),
            pad_id=int(pad), reply_prefix=self._reply_prefix(text),
        )


def standin_path() -> str:
    """Directory of the bundled stand-in tokenizer."""
    return str(Path(str(resources.files("app"))) / "assets" / "standin_tokenizer")


def _load_hf(source: str) -> Any:
    # Only tokenizers are needed here: silence transformers' advice that torch is missing.
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        if (Path(source) / "tokenizer.json").is_file():
            # A local tokenizer.json is the whole tokenizer: the generic fast class loads it
            # with its chat template and special tokens, without AutoTokenizer's model-config
            # machinery, which imports torch where it is installed (seconds of every submit).
            # The ids are the model class's (tests/unit/tokenizer/test_hf.py).
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast.from_pretrained(source)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, KeyError, ImportError) as exc:
        raise ConfigError(
            f"cannot load tokenizer {source!r}: {exc}. Pass --tokenizer (DREADS_TOKENIZER) as "
            f"the served model's hub id (cached locally or reachable), a local directory with "
            f"tokenizer.json, or {STANDIN!r} for the bundled offline stand-in"
        ) from exc


@functools.cache
def load_tokenizer(name_or_path: str) -> HFTextTokenizer:
    """Load a tokenizer once per process by hub name, local path, or ``"standin"``.

    Raises:
        ConfigError: it cannot be loaded; the message says what to pass.
    """
    if not name_or_path:
        raise ConfigError(f"no tokenizer given; pass a hub id, a directory or {STANDIN!r}")
    source = standin_path() if name_or_path == STANDIN else name_or_path
    return HFTextTokenizer(_load_hf(source), name_or_path,
                           source=None if name_or_path == STANDIN else source)
