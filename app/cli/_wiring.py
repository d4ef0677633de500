"""What the run commands build from settings: the read settings of a run, its engine and
upstream. ``env`` is the command's ``Settings`` (read once, at the command's start).
Everything heavy (SQLAlchemy, the tokenizer, Celery, the HTTP client) is imported inside the
functions, so that importing the CLI stays fast."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.engine import (
    ReadSettings,
    TextTokenizer,
    check_settings,
    plans_reads,
    settings_from_dict,
)
from app.runs.settings import base_read_settings, endpoint_read_settings

if TYPE_CHECKING:
    from app.config import Settings
    from app.connect.factory import UpstreamConfig
    from app.store.runs import RunInfo
    from app.store.types import SessionFactory

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
    *, env: Settings, engine: str = "vllm", upstream: str | None = None,
) -> tuple[ReadSettings, int, TextTokenizer]:
    """An existing run's own settings (what was given on top, to be checked), or the
    ``DREADS_*`` defaults for a new run (an in-process engine: the model's tokenizer;
    model and tokenizer not set at all: the ones served at ``upstream``, see
    ``base_read_settings``); its replicate count; its tokenizer."""
    from app.tokenizer.hf import load_tokenizer

    if info is None and not plans_reads(given.get("answer_by")):
        settings = endpoint_read_settings(dict(given), upstream=upstream_url(upstream, None, env),
                                          env=env)
        n = replicates or 1
    elif info is None:
        from app.connect.engines import is_in_process

        url = None if is_in_process(engine) else upstream_url(upstream, None, env)
        settings = base_read_settings(dict(given), env=env, engine=engine, upstream=url)
        n = replicates or 1
    else:
        settings = replace(settings_from_dict(dict(info.settings)), **given)
        n = replicates or info.replicates
    if info is None:
        check_settings(settings)
    return settings, n, load_tokenizer(settings.tokenizer)


def resolve_engine(info: RunInfo | None, *, engine: str | None, device: str | None,
                   dtype: str | None, env: Settings) -> UpstreamConfig:
    """The engine choice (``app.runs.settings.engine_choice``): the options given, else the
    run's own engine (an existing run), else ``DREADS_ENGINE``."""
    from app.runs.settings import engine_choice

    return engine_choice(info.engine if info is not None else None, engine=engine,
                         device=device, dtype=dtype, env=env)


def run_upstream(given: str | None, info: RunInfo | None, choice: UpstreamConfig,
                 settings: ReadSettings, env: Settings) -> str:
    """What the run records as its upstream (``app.runs.settings.run_upstream``)."""
    from app.runs.settings import run_upstream as _run_upstream

    return _run_upstream(given, info.upstream if info is not None else None, choice, settings,
                         env)


def upstream_url(given: str | None, info: RunInfo | None, env: Settings) -> str:
    """The server to read from (``app.runs.settings.upstream_url``)."""
    from app.runs.settings import upstream_url as _upstream_url

    return _upstream_url(given, info.upstream if info is not None else None, env)
