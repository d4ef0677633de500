"""``dreads check-upstream``: wait for an upstream, do one real read, print its fingerprint.

Exit codes: 0 ready; 1 the upstream failed or is not ready; 2 a user error (bad option).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated

import orjson
import typer
from rich.markup import escape
from rich.table import Table

from app.cli._app import SERVERS, app
from app.cli._direct import direct_target, direct_tokenizer, direct_upstream
from app.cli._wiring import resolve_engine
from app.cli.engine import DeviceOpt, DtypeOpt, EngineOpt
from app.cli.options import (
    DEFAULT_WAIT_S,
    NOT_GIVEN,
    JsonOpt,
    ReadGiven,
    WaitOpt,
    base_read_settings,
    checked_url,
    console,
    err_console,
    exit_error,
    with_read_options,
)
from app.engine import (
    ReadSettings,
    ServerFingerprint,
    build_probe_request,
    is_simulator,
)
from app.errors import (
    EXIT_USAGE,
    DreadsError,
)
from app.runs.settings import wait_served_settings

if TYPE_CHECKING:
    from app.connect.factory import UpstreamConfig

__all__ = ["check_upstream"]


@dataclass(frozen=True)
class _Check:
    fingerprint: ServerFingerprint
    read_latency_ms: float
    prompt_tokens: int | None
    waited_s: float


async def _check(url: str, settings: ReadSettings, timeout_s: float,
                 choice: UpstreamConfig) -> _Check:
    tokenizer = direct_tokenizer(settings.tokenizer)
    probe = build_probe_request(settings, tokenizer)
    upstream = direct_upstream(url, settings, choice)
    started = time.monotonic()
    try:
        await upstream.wait_ready(timeout_s=timeout_s, probe=probe)
        waited_s = time.monotonic() - started
        fingerprint = await upstream.fingerprint()
        read_started = time.perf_counter()
        result = await upstream.read(probe)
        latency_ms = (time.perf_counter() - read_started) * 1000.0
    finally:
        await upstream.aclose()
    return _Check(fingerprint, latency_ms, result.prompt_tokens, waited_s)


def _fingerprint_table(check: _Check, url: str, settings: ReadSettings) -> Table:
    fp = check.fingerprint
    table = Table(title=f"upstream {url}: ready", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    engine = f"{fp.engine} (SIMULATOR)" if is_simulator(url, fp) else fp.engine
    for name, value in (("engine", engine), ("model", fp.model_id),
                        ("max_model_len", fp.max_model_len), ("version", fp.version),
                        ("canvas_length", fp.canvas_length),
                        ("batch invariant", _invariance(fp)),
                        ("ready after", f"{check.waited_s:.1f}s"),
                        ("read latency", f"{check.read_latency_ms:.1f} ms"),
                        ("probe prompt tokens", check.prompt_tokens)):
        table.add_row(name, "-" if value is None else str(value))
    if fp.canvas_length != settings.canvas_length:
        table.add_row("[yellow]warning[/yellow]",
                      f"the server's canvas is {fp.canvas_length}, the settings say "
                      f"{settings.canvas_length}: pass --canvas {fp.canvas_length}")
    return table


def _invariance(fp: ServerFingerprint) -> str | None:
    """The fingerprint's batch invariance in words, and where it comes from."""
    if fp.batch_invariant is None:
        return None
    return f"{'yes' if fp.batch_invariant else 'no'} ({fp.batch_invariant_from})"


@app.command("check-upstream", rich_help_panel=SERVERS)
@with_read_options(only=("model", "tokenizer", "canvas"))
def check_upstream(
    url: Annotated[str | None, typer.Argument(
        metavar="URL", show_default=False, callback=checked_url,
        help="vLLM (or dreads sim) base URL (default DREADS_UPSTREAM; none with --engine "
        "transformers).")] = None,
    timeout: WaitOpt = DEFAULT_WAIT_S,
    given: ReadGiven = NOT_GIVEN,
    json_out: JsonOpt = False,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
) -> None:
    """Wait until an upstream is ready, do one real read, print its fingerprint and latency."""
    import asyncio

    from app.config import run_env

    env = run_env()
    overrides = dict(given)
    try:
        choice = resolve_engine(None, engine=engine, device=device, dtype=dtype, env=env)
        settings = base_read_settings(overrides, env=env, engine=choice.engine)
        url = direct_target(url, choice, settings, env)
        if json_out:
            settings = asyncio.run(wait_served_settings(url, settings, overrides, choice, timeout,
                                                        env=env))
            check = asyncio.run(_check(url, settings, timeout, choice))
        else:
            with console.status(f"waiting for {url} (up to {timeout:g}s): model list, then "
                                "one real read ..."):
                settings = asyncio.run(wait_served_settings(url, settings, overrides, choice,
                                                            timeout, env=env))
                check = asyncio.run(_check(url, settings, timeout, choice))
    except DreadsError as exc:
        if exc.exit_code == EXIT_USAGE and not json_out:
            exit_error(exc, exc.exit_code)
        _not_ready(url, exc, json_out)
        raise typer.Exit(exc.exit_code) from exc
    if json_out:
        typer.echo(orjson.dumps({"ready": True, **asdict(check),
                                 "simulator": is_simulator(url, check.fingerprint)}).decode())
    else:
        console.print(_fingerprint_table(check, url, settings))


def _not_ready(url: str | None, exc: DreadsError, json_out: bool) -> None:
    if json_out:
        typer.echo(orjson.dumps({"ready": False, "kind": exc.kind, "error": exc.message}).decode())
        return
    from app.engine import redact_url

    err_console.print(f"[red]not ready:[/red] {escape(redact_url(str(url)))}: "
                      f"{escape(exc.message)}; "
                      "check: the URL and port, that vLLM finished loading (GET /v1/models), "
                      "the served model name (--model), the canvas (--canvas) and the "
                      "tokenizer (--tokenizer)", highlight=False, soft_wrap=True)


# -- decide -----------------------------------------------------------------------------------
