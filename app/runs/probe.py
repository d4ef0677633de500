"""Is this server the run's? Its fingerprint, and one read at the run's full canvas width.

A run records the server it first reached (its fingerprint: model id, canvas length,
``max_model_len``, version). ``submit`` takes it; ``resume`` compares it with the server the
run would continue on and refuses another model or canvas, so a run never mixes two models'
answers. ``/v1/models`` does not report the served canvas, so a read at the run's full canvas
width proves it.

A ``Server`` is where a run's reads go, as these checks see it:

- ``ServerAt``: a server at a URL (vLLM, dreads sim) or an in-process engine, reached through a
  client made for the check and closed after (the CLI);
- ``LoadedServer``: the upstream a long-running process already holds (``dreads serve``),
  asked on that process's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from app.connect.factory import UpstreamConfig, make_upstream
from app.engine import (
    ReadSettings,
    ServerFingerprint,
    TextTokenizer,
    build_probe_request,
    changed_batch_invariance,
    changed_fingerprint,
    redact_url,
)
from app.errors import (
    ConfigError,
    RunSettingsMismatch,
    UpstreamRejected,
    UpstreamUnauthorized,
    UpstreamUnavailable,
)
from app.store.db import session_scope
from app.store.records import RunInfo
from app.store.runs import record_fingerprint
from app.store.types import SessionFactory
from app.upstream.base import Upstream

__all__ = ["LoadedServer", "ProbeTokenizer", "Server", "ServerAt", "check_server",
           "fingerprint_dict", "reads_config"]

#: The run's tokenizer, or what loads it: loaded only once the server answered.
ProbeTokenizer = TextTokenizer | Callable[[], TextTokenizer]
#: A fingerprint, or None and why the server could not be asked now.
Asked = tuple[ServerFingerprint | None, str | None]


def reads_config(base: UpstreamConfig, url: str, settings: ReadSettings, *,
                 max_in_flight: int | None = None) -> UpstreamConfig:
    """``base`` (the engine chosen, with the process's read limits: ``app.runs.settings.
    env_engine``) reading ``settings`` at ``url``."""
    return replace(base, url=url, model=settings.model, canvas_length=settings.canvas_length,
                   tokenizer=settings.tokenizer,
                   max_in_flight=max_in_flight or base.max_in_flight)


def fingerprint_dict(fingerprint: ServerFingerprint | None) -> dict[str, Any] | None:
    """A fingerprint as the run records it."""
    if fingerprint is None:
        return None
    return {"engine": fingerprint.engine, "model_id": fingerprint.model_id,
            "max_model_len": fingerprint.max_model_len, "version": fingerprint.version,
            "canvas_length": fingerprint.canvas_length,
            "constrained": fingerprint.constrained,
            "batch_invariant": fingerprint.batch_invariant,
            "batch_invariant_from": fingerprint.batch_invariant_from}


class Server(Protocol):
    """Where a run's reads go."""

    @property
    def url(self) -> str: ...

    def fingerprint(self, settings: ReadSettings, tokenizer: ProbeTokenizer | None) -> Asked:
        """The server's fingerprint for a run of ``settings`` (with ``tokenizer``, after a read
        at the run's full canvas width), or (None, why) when it cannot be reached now.

        Raises:
            UpstreamRejected: it answers but does not serve ``settings.model``.
            ConfigError: it refuses the API key, or a read at the run's canvas width.
        """
        ...


@dataclass(frozen=True)
class ServerAt:
    """A server reached through a client made for the check (``config``: the engine chosen,
    with the process's read limits), closed after."""

    url: str
    config: UpstreamConfig
    timeout_s: float = 10.0

    def fingerprint(self, settings: ReadSettings, tokenizer: ProbeTokenizer | None) -> Asked:
        async def ask() -> ServerFingerprint:
            upstream = make_upstream(reads_config(self.config, self.url, settings))
            try:
                return await _fingerprint(upstream, settings, tokenizer, self.timeout_s)
            finally:
                await upstream.aclose()

        return _asked(lambda: asyncio.run(ask()), self.url, self.timeout_s)


@dataclass(frozen=True)
class LoadedServer:
    """The upstream a running process holds, asked on its event loop ``loop`` from another
    thread (the caller's)."""

    url: str
    upstream: Upstream
    loop: asyncio.AbstractEventLoop
    model: str  #: the model it serves
    timeout_s: float = 10.0

    def fingerprint(self, settings: ReadSettings, tokenizer: ProbeTokenizer | None) -> Asked:
        if settings.model != self.model:
            raise UpstreamRejected(f"{redact_url(self.url)} serves {self.model}, not "
                                   f"{settings.model!r}",
                                   param="model")
        coro = _fingerprint(self.upstream, settings, tokenizer, self.timeout_s)
        return _asked(lambda: _on_loop(coro, self.loop), self.url, self.timeout_s)


def _on_loop(coro: Coroutine[Any, Any, ServerFingerprint],
             loop: asyncio.AbstractEventLoop) -> ServerFingerprint:
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def _asked(ask: Callable[[], ServerFingerprint], url: str, timeout_s: float) -> Asked:
    try:
        return ask(), None
    except UpstreamUnauthorized as exc:
        raise ConfigError(exc.message) from exc
    except UpstreamUnavailable as exc:
        return None, exc.message
    except TimeoutError:
        return None, f"no answer from {redact_url(url)} within {timeout_s:.0f}s"


async def _fingerprint(upstream: Upstream, settings: ReadSettings,
                       tokenizer: ProbeTokenizer | None, timeout_s: float) -> ServerFingerprint:
    fingerprint = await asyncio.wait_for(upstream.fingerprint(), timeout_s)
    if tokenizer is not None:
        loaded = tokenizer() if callable(tokenizer) else tokenizer
        await _probe_canvas(upstream, settings, loaded, timeout_s)
    return fingerprint


async def _probe_canvas(upstream: Upstream, settings: ReadSettings, tokenizer: TextTokenizer,
                        timeout_s: float) -> None:
    """One read at the run's full canvas width; a server that refuses it cannot run the run."""
    probe = build_probe_request(settings, tokenizer)
    try:
        await asyncio.wait_for(upstream.wait_ready(timeout_s=timeout_s, probe=probe), timeout_s)
    except UpstreamUnauthorized:
        raise
    except UpstreamRejected as exc:
        raise ConfigError(
            f"the upstream refused a read at the run's canvas width {settings.canvas_length} "
            f"({exc.message}); pass --canvas (DREADS_CANVAS) equal to the canvas_length the "
            "server was started with (--diffusion-config), or check --model") from exc


#: How a refusal ends: the same words for ``dreads resume`` and ``POST /v1/runs/{run}/resume``.
_GO_ON = ("resume it against its original server (dreads resume --upstream URL), or force it "
          "(--force; force=true over HTTP) to continue anyway")


def check_server(factory: SessionFactory, run: RunInfo, server: Server, settings: ReadSettings,
                 *, force: bool, tokenizer: ProbeTokenizer | None = None,
                 dry_run: bool = False) -> str | None:
    """Refuse a server whose model or canvas differs from the run's, or that refuses a read at
    the run's canvas width (with ``tokenizer``, the run's), unless ``force`` (a run whose reads
    are narrower than its canvas may go on); record the fingerprint when the run has none yet
    (``dry_run``: only say it would). Returns a note for the user.

    Raises:
        RunSettingsMismatch: another model or canvas, and not ``force``.
        ConfigError: the server refuses the key, or a read at the run's canvas width.
    """
    old = dict(run.fingerprint or {})
    try:
        fingerprint, why = server.fingerprint(settings, None if force else tokenizer)
    except UpstreamRejected as exc:  # it serves another model than the run's
        if not force:
            raise RunSettingsMismatch(
                f"run {run.name!r} started against model {old.get('model_id', settings.model)!r}"
                f" but {exc.message}; {_GO_ON}") from exc
        return f"--force: continuing although {exc.message}"
    if fingerprint is None:
        return f"upstream not reached ({why}): server fingerprint not checked"
    changes = changed_fingerprint(run.fingerprint, fingerprint)
    diffs = "; ".join(map(str, changes))
    if changes and not force:
        raise RunSettingsMismatch(
            f"run {run.name!r} started against another server ({diffs}); answers would mix two "
            f"models or canvases: {_GO_ON}")
    if run.fingerprint is None:
        return _record(factory, run, fingerprint, dry_run=dry_run)
    notes = [_invariance_note(run.fingerprint, fingerprint)]
    if changes:
        notes.insert(0, f"--force: continuing against a different server ({diffs})")
    elif force and tokenizer is not None:
        notes.insert(0, f"--force: the served canvas was not proved by a read at the run's "
                        f"width {settings.canvas_length}")
    return "; ".join(note for note in notes if note) or None


def _invariance_note(recorded: Mapping[str, Any], fingerprint: ServerFingerprint) -> str | None:
    """A note (never a refusal) when the server's batch invariance is not the recorded one."""
    if changed_batch_invariance(recorded, fingerprint) is None:
        return None
    was = _invariance_words(recorded.get("batch_invariant"),
                            recorded.get("batch_invariant_from"))
    now = _invariance_words(fingerprint.batch_invariant, fingerprint.batch_invariant_from)
    return (f"the server's batch invariance differs from the run's ({was} when recorded, {now} "
            "now): the same read may not give the same answer as before (docs/deployment.md, "
            "'Same request, same answer')")


def _invariance_words(value: object, source: object) -> str:
    if value is None:
        return "unknown"
    return f"{'on' if value else 'off'} ({source or 'declared'})"


def _record(factory: SessionFactory, run: RunInfo, fingerprint: ServerFingerprint, *,
            dry_run: bool) -> str:
    if dry_run:
        return f"server fingerprint would be recorded: {fingerprint.model_id}"
    with session_scope(factory) as session:
        record_fingerprint(session, run.id, fingerprint_dict(fingerprint) or {})
    return f"server fingerprint recorded: {fingerprint.model_id}"
