"""``--wait SECONDS`` of the run commands (``run``, ``submit``, ``resume``): poll the run's
model server until it is ready, as ``check-upstream`` does (its model list, then one real
read at the run's canvas width), with a line that says what it waits for.

A server that answers but refuses (another model, a key, a canvas) ends the wait at once:
the command's own checks then say what is wrong. The simulator a command starts itself, an
in-process engine and a run answered by a decision endpoint have nothing to wait for.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from app.cli.options import err_console
from app.engine import SIM, ReadSettings, plans_reads, redact_url
from app.errors import ConfigError, UpstreamRejected, UpstreamUnavailable

if TYPE_CHECKING:
    from rich.status import Status

    from app.connect.factory import UpstreamConfig
    from app.runs.env import RunEnv
    from app.store.records import RunInfo
    from app.upstream.base import WaitProgress

__all__ = ["suggest_wait", "wait_for_run", "wait_for_server"]


@contextmanager
def suggest_wait(wait_s: float) -> Iterator[None]:
    """A server that cannot be reached, when the command did not wait for it: its error line
    says how to wait for one still loading.

    Raises:
        UpstreamUnavailable: the one raised inside, with that hint when ``wait_s`` is 0.
    """
    try:
        yield
    except UpstreamUnavailable as exc:
        if wait_s > 0:
            raise
        raise UpstreamUnavailable(f"{exc.message}; if it is still loading, wait for it with "
                                  "--wait SECONDS", kind=exc.kind, status=exc.status) from exc


def wait_for_run(upstream: str | None, wait_s: float, run: RunInfo | None, *,
                 given: Mapping[str, Any], choice: UpstreamConfig, env: RunEnv) -> None:
    """``wait_for_server`` for the server ``run`` (None: a new run) reads from: ``--upstream``,
    else ``DREADS_UPSTREAM`` when set, else the run's own (``app.runs.settings.upstream_url``).
    """
    if wait_s <= 0:
        return
    from app.engine import settings_from_dict
    from app.runs.settings import upstream_url

    settings = settings_from_dict(dict(run.settings)) if run is not None else None
    url = upstream_url(upstream, run.upstream if run is not None else None, env)
    wait_for_server(url, wait_s, settings=settings, given=given, choice=choice, env=env)


def wait_for_server(url: str, wait_s: float, *, settings: ReadSettings | None,
                    given: Mapping[str, Any], choice: UpstreamConfig, env: RunEnv) -> None:
    """Wait up to ``wait_s`` for the server at ``url`` to be ready for a run of ``settings``
    (an existing run's), or of the settings ``given`` resolve to (a new run: model and
    tokenizer set nowhere are the ones it comes to serve). Nothing to wait for: returns.

    Raises:
        UpstreamUnavailable: not ready within ``wait_s`` (exit 1).
    """
    import asyncio

    if wait_s <= 0 or not _waits_for(url, settings, given, choice):
        return
    started = time.monotonic()
    last = ["no answer yet"]
    err_console.print(f"waiting up to {wait_s:g}s for {escape(redact_url(url))}: its model "
                      "list, then one real read", highlight=False)
    with _status(url, wait_s) as status:
        def progress(_waited: float, why: str) -> None:
            last[0] = why.split("; ", 1)[0]
            if status is not None:
                status.update(_line(url, time.monotonic() - started, wait_s, last[0]))

        try:
            asyncio.run(_ready(url, started + wait_s, settings, given, choice, env, progress))
        except UpstreamUnavailable as exc:
            raise UpstreamUnavailable(
                f"{url} not ready after {wait_s:g}s ({last[0]}); check the URL, that the "
                "server finished loading its model (GET /v1/models answers), or wait longer "
                "(--wait SECONDS)", kind=exc.kind) from exc
    err_console.print(f"{escape(redact_url(url))} ready after {time.monotonic() - started:.1f}s",
                      highlight=False)


def _waits_for(url: str, settings: ReadSettings | None, given: Mapping[str, Any],
               choice: UpstreamConfig) -> bool:
    from app.connect.engines import is_in_process

    answer_by = settings.answer_by if settings is not None else given.get("answer_by")
    by_endpoint = not plans_reads(answer_by)
    return not (url == SIM or is_in_process(choice.engine) or by_endpoint)


def _status(url: str, wait_s: float) -> AbstractContextManager[Status | None]:
    """A line that shows the time waited and why (on a terminal; elsewhere the lines before
    and after the wait say it)."""
    if not err_console.is_terminal:
        return nullcontext()
    return err_console.status(_line(url, 0.0, wait_s, "asking"))


def _line(url: str, waited: float, wait_s: float, why: str) -> str:
    return (f"waiting for {escape(url)} ({waited:.0f}s of {wait_s:g}s, Ctrl-C stops): "
            f"{escape(why)}")


async def _ready(url: str, deadline: float, settings: ReadSettings | None,
                 given: Mapping[str, Any], choice: UpstreamConfig, env: RunEnv,
                 progress: WaitProgress) -> None:
    from app.connect.factory import make_upstream
    from app.engine import build_probe_request
    from app.runs.probe import reads_config
    from app.runs.settings import base_read_settings, wait_served_settings
    from app.tokenizer.hf import load_tokenizer

    if settings is None:
        overrides = dict(given)
        base = base_read_settings(overrides, env=env, engine=choice.engine)
        settings = await wait_served_settings(url, base, overrides, choice,
                                              deadline - time.monotonic(), env=env,
                                              progress=progress)
    probe = build_probe_request(settings, load_tokenizer(settings.tokenizer))
    upstream = make_upstream(reads_config(choice, url, settings))
    try:
        await upstream.wait_ready(timeout_s=max(0.5, deadline - time.monotonic()),
                                  probe=probe, progress=progress)
    except (UpstreamRejected, ConfigError):
        return  # it answers: the command's checks say what it refuses
    finally:
        await upstream.aclose()
