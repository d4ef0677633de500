"""What ``check-upstream`` and ``decide`` share: an upstream read straight, with no store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.connect.engines import is_in_process
from app.engine import (
    ReadSettings,
    TextTokenizer,
)
from app.errors import (
    InputError,
)
from app.runs.settings import env_upstream

if TYPE_CHECKING:
    from app.connect.factory import UpstreamConfig
    from app.runs.env import RunEnv
    from app.upstream.base import Upstream

__all__ = ["direct_target", "direct_tokenizer", "direct_upstream"]


def direct_upstream(url: str, settings: ReadSettings, choice: UpstreamConfig) -> Upstream:
    from app.connect.factory import make_upstream
    from app.runs.probe import reads_config

    return make_upstream(reads_config(choice, url, settings))


def direct_target(url: str | None, choice: UpstreamConfig, settings: ReadSettings,
            env: RunEnv) -> str:
    """The URL to read from, or the model the transformers engine loads in this process."""
    if not is_in_process(choice.engine):
        return url or env_upstream(env)
    if url:
        raise InputError(f"{url} is an upstream URL, for an engine that reads from a server; "
                         f"with --engine {choice.engine} the model (--model DIR or hub id) is "
                         "read in this process: drop the URL")
    return choice.model_path or settings.model


def direct_tokenizer(name: str) -> TextTokenizer:
    from app.tokenizer.hf import load_tokenizer

    return load_tokenizer(name)
