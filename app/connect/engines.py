"""The engines that read, as a registry: what each one is, and what builds its ``Upstream``.

Adding an engine is one ``EngineKind`` member and one ``ENGINES`` entry here, plus the module
its factory names; the CLI's ``--engine`` help, ``DREADS_ENGINE`` and the run settings'
defaults follow from ``EngineSpec`` (no other module compares engine names).

    >>> engine_spec("transformers").in_process
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, cast

from app.errors import ConfigError

if TYPE_CHECKING:
    from app.connect.factory import UpstreamConfig
    from app.upstream.base import Upstream

__all__ = ["ENGINES", "EngineKind", "EngineSpec", "engine_names", "engine_spec",
           "is_in_process"]


class EngineKind(StrEnum):
    VLLM = "vllm"  #: HTTP: vLLM, or dreads sim (``--upstream sim`` starts one in-process)
    TRANSFORMERS = "transformers"  #: in-process DiffusionGemma (``pip install -e .[engine]``)


@dataclass(frozen=True)
class EngineSpec:
    """One engine: how it reads and what builds it."""

    kind: EngineKind
    #: Reads run in this process: no server and no URL; the run's ``--model`` (a checkpoint dir
    #: or hub id) is loaded here, and its canvases use the model's own tokenizer unless
    #: ``--tokenizer`` is given. Otherwise the engine reads from a server at a URL, whose served
    #: model and tokenizer are a new run's defaults.
    in_process: bool
    #: ``"module:function"`` taking an ``UpstreamConfig`` and returning the ``Upstream``
    #: (imported only when an upstream is built: an engine's dependencies stay optional).
    factory: str
    summary: str  #: one line for ``--engine``'s help

    def make(self, config: UpstreamConfig) -> Upstream:
        module, _, name = self.factory.partition(":")
        build = getattr(importlib.import_module(module), name)
        return cast("Callable[[UpstreamConfig], Upstream]", build)(config)


ENGINES: Mapping[EngineKind, EngineSpec] = {
    EngineKind.VLLM: EngineSpec(
        EngineKind.VLLM, in_process=False, factory="app.connect.factory:make_http_upstream",
        summary="HTTP: vLLM or dreads sim"),
    EngineKind.TRANSFORMERS: EngineSpec(
        EngineKind.TRANSFORMERS, in_process=True,
        factory="app.inprocess:make_transformers_upstream",
        summary="in-process; --model is then a checkpoint dir or hub id"),
}


def engine_names() -> tuple[str, ...]:
    return tuple(str(kind) for kind in ENGINES)


def engine_spec(name: str) -> EngineSpec:
    """The engine called ``name``.

    Raises:
        ConfigError: no engine has that name; the message lists what to pass.
    """
    try:
        return ENGINES[EngineKind(name)]
    except ValueError:
        choices = " or ".join(f"--engine {n}" for n in engine_names())
        raise ConfigError(f"unknown engine {name!r}: pass {choices}") from None


def is_in_process(name: str | None) -> bool:
    """Whether engine ``name`` reads in this process (None: the default, vllm: no)."""
    return name is not None and engine_spec(name).in_process
