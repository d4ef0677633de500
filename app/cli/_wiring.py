"""What the run commands build from settings: the read settings of a run, its engine and
upstream. ``env`` is the command's ``Settings`` (read once, at the command's start).
Everything heavy (SQLAlchemy, the tokenizer, Celery, the HTTP client) is imported inside the
functions, so that importing the CLI stays fast."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from app.engine import (
    ReadSettings,
    TextTokenizer,
    check_settings,
    plans_reads,
    settings_from_dict,
)
from app.errors import ConfigError, UpstreamUnavailable
from app.runs.settings import base_read_settings, endpoint_read_settings

if TYPE_CHECKING:
    from app.connect.factory import UpstreamConfig
    from app.runs.env import RunEnv
    from app.runs.submission import Resolved
    from app.store.runs import RunInfo

__all__ = [
    "ReadChoice",
    "resolve_engine",
    "resolve_run",
    "resolve_settings",
    "run_upstream",
    "upstream_url",
]

log = logging.getLogger("dreads.cli")


def resolve_settings(
    info: RunInfo | None, given: Mapping[str, Any], replicates: int | None,
    *, env: RunEnv, engine: str = "vllm", upstream: str | None = None,
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


@dataclass(frozen=True)
class ReadChoice:
    """A run command's options for how its run reads (None: not given)."""

    given: Mapping[str, Any]  #: the read settings given (``with_read_options``)
    upstream: str | None = None  #: ``--upstream``
    wait_s: float = 0.0  #: ``--wait``
    engine: str | None = None
    device: str | None = None
    dtype: str | None = None


def resolve_run(info: RunInfo | None, options: ReadChoice, *, env: RunEnv,
                suggest_sim: bool = False) -> Resolved:
    """How the run ``info`` (None: a new one) reads, for ``app.runs.submission.submit_run``:
    its engine, its server waited for (``--wait``), its settings and tokenizer, the upstream
    it records. ``suggest_sim``: a server that cannot say what it serves suggests the
    simulator (``dreads run`` without ``--upstream``)."""
    from app.cli._wait import wait_for_run
    from app.runs.submission import Resolved

    choice = resolve_engine(info, engine=options.engine, device=options.device,
                            dtype=options.dtype, env=env)
    wait_for_run(options.upstream, options.wait_s, info, given=options.given, choice=choice,
                 env=env)
    try:
        settings, _, tokenizer = resolve_settings(info, options.given, None, env=env,
                                                  engine=choice.engine,
                                                  upstream=options.upstream)
    except (ConfigError, UpstreamUnavailable) as exc:
        if not suggest_sim or options.upstream is not None:
            raise
        hint = f"{exc.message}; or try --upstream sim (the built-in simulator)"
        if isinstance(exc, UpstreamUnavailable):
            raise UpstreamUnavailable(hint, kind=exc.kind) from exc
        raise ConfigError(hint) from exc
    url = run_upstream(options.upstream, info, choice, settings, env)
    return Resolved(settings, url, choice, tokenizer)


def resolve_engine(info: RunInfo | None, *, engine: str | None, device: str | None,
                   dtype: str | None, env: RunEnv) -> UpstreamConfig:
    """The engine choice (``app.runs.settings.engine_choice``): the options given, else the
    run's own engine (an existing run), else ``DREADS_ENGINE``."""
    from app.runs.settings import engine_choice

    return engine_choice(info.engine if info is not None else None, engine=engine,
                         device=device, dtype=dtype, env=env)


def run_upstream(given: str | None, info: RunInfo | None, choice: UpstreamConfig,
                 settings: ReadSettings, env: RunEnv) -> str:
    """What the run records as its upstream (``app.runs.settings.run_upstream``)."""
    from app.runs.settings import run_upstream as _run_upstream

    return _run_upstream(given, info.upstream if info is not None else None, choice, settings,
                         env)


def upstream_url(given: str | None, info: RunInfo | None, env: RunEnv) -> str:
    """The server to read from (``app.runs.settings.upstream_url``)."""
    from app.runs.settings import upstream_url as _upstream_url

    return _upstream_url(given, info.upstream if info is not None else None, env)
