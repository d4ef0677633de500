"""What the run commands build from settings: the read settings of a run, its engine and
upstream. Everything heavy (SQLAlchemy, the tokenizer, Celery, the HTTP client) is imported
inside the functions, so that importing the CLI stays fast."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.cli.options import base_read_settings, endpoint_read_settings
from app.engine import AnswerBy, ReadSettings, TextTokenizer, check_settings, settings_from_dict
from app.errors import InputError

if TYPE_CHECKING:
    from app.store.runs import RunInfo
    from app.store.types import SessionFactory
    from app.upstream.factory import UpstreamConfig

__all__ = [
    "existing_run",
    "resolve_engine",
    "resolve_settings",
    "run_upstream",
    "upstream_url",
]

log = logging.getLogger("dreads.cli")


def existing_run(factory: SessionFactory, run: str) -> RunInfo | None:
    """The run named ``run``, or None for a new run (read once, passed to the resolvers)."""
    from app.store.db import session_scope
    from app.store.runs import find_run

    with session_scope(factory) as session:
        return find_run(session, run)


def resolve_settings(
    info: RunInfo | None, given: Mapping[str, Any], replicates: int | None,
    *, engine: str = "vllm", upstream: str | None = None,
) -> tuple[ReadSettings, int, TextTokenizer]:
    """An existing run's own settings (what was given on top, to be checked), or the
    ``DREADS_*`` defaults for a new run (``engine`` "transformers": the model's tokenizer;
    model and tokenizer not set at all: the ones served at ``upstream``, see
    ``base_read_settings``); its replicate count; its tokenizer."""
    from app.upstream.tokenizer import load_tokenizer

    if info is None and given.get("answer_by", AnswerBy.READS) is not AnswerBy.READS:
        settings = endpoint_read_settings(dict(given), upstream=upstream_url(upstream, None))
        n = replicates or 1
    elif info is None:
        url = None if engine == "transformers" else upstream_url(upstream, None)
        settings = base_read_settings(dict(given), engine=engine, upstream=url)
        n = replicates or 1
    else:
        settings = replace(settings_from_dict(dict(info.settings)), **given)
        n = replicates or info.replicates
    if info is None:
        check_settings(settings)
    return settings, n, load_tokenizer(settings.tokenizer)


def resolve_engine(info: RunInfo | None, *, engine: str | None,
                   device: str | None, dtype: str | None) -> UpstreamConfig:
    """The engine choice: the options given, else the run's own engine (an existing run),
    else ``DREADS_ENGINE``; device and dtype from the options or ``DREADS_DEVICE/DTYPE``."""
    from app.cli.engine import ENGINES, engine_config
    from app.config import get_settings
    from app.upstream.factory import UpstreamConfig

    env = get_settings()
    recorded = info.engine if info is not None and info.engine in ENGINES else env.engine
    base = UpstreamConfig(engine=recorded, device=env.device, dtype=env.dtype)
    return engine_config(base, engine=engine, device=device, dtype=dtype)


def run_upstream(given: str | None, info: RunInfo | None,
                 choice: UpstreamConfig, settings: ReadSettings) -> str:
    """What the run records as its upstream: the URL (``upstream_url``) for vLLM; the model
    read in this process for the transformers engine (no server, no URL).

    Raises:
        InputError: ``--upstream`` given together with ``--engine transformers``.
    """
    if choice.engine != "transformers":
        return upstream_url(given, info)
    if given:
        raise InputError(f"--upstream {given} is for the vllm engine; with --engine "
                         "transformers the model (--model DIR or hub id) is read in this "
                         "process: drop --upstream")
    return choice.model_path or settings.model


def upstream_url(given: str | None, info: RunInfo | None) -> str:
    """The server to read from: ``--upstream``, else ``DREADS_UPSTREAM`` when it is set (the
    server may have moved since the run started: a restarted pod has a new address), else the
    run's own recorded upstream, else the default."""
    from app.config import get_settings

    if given:
        return given
    env = get_settings()
    if "upstream" in env.model_fields_set or info is None:
        return env.upstream
    return info.upstream
