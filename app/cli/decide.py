"""``dreads decide``: answer a few decisions straight from an upstream, no database.

Exit codes: 0 ok; 1 the upstream failed; 2 a user error (bad line, rejected template, bad
option).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
    UpstreamOpt,
    WaitOpt,
    base_read_settings,
    console,
    err_console,
    exit_error,
    with_read_options,
)
from app.engine import (
    Answer,
    Decision,
    ReadSettings,
    ServerFingerprint,
    TextTokenizer,
    all_kinds,
    either,
    is_simulator,
    kind_named,
    kind_names,
    parse_decision,
)
from app.errors import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    DreadsError,
    InputError,
    UpstreamError,
)
from app.runs.settings import image_policy, wait_served_settings

if TYPE_CHECKING:
    from app.connect.factory import UpstreamConfig
    from app.images import ImagePolicy
    from app.runs.jobfile import NumberedLine
    from app.upstream.base import Upstream

__all__ = ["DecideOutcome", "decide", "decide_all", "load_decisions"]


@dataclass
class DecideOutcome:
    """One line's outcome: answers, or why there are none."""

    line_no: int
    decision_id: str | None
    status: str  #: done | rejected | failed | bad_line
    answers: tuple[Answer, ...] = ()
    error: str | None = None
    kind: str | None = None


def load_decisions(lines: Sequence[str]) -> list[Decision | DecideOutcome]:
    """Parse JSONL lines; a bad line becomes a ``bad_line`` outcome with its line number."""
    return _load_numbered((n, line) for n, line in enumerate(lines, start=1) if line.strip())


def _load_numbered(lines: Iterable[NumberedLine]) -> list[Decision | DecideOutcome]:
    out: list[Decision | DecideOutcome] = []
    for line_no, line in lines:
        try:
            if isinstance(line, InputError):  # a line that is not UTF-8
                raise line
            out.append(parse_decision(orjson.loads(line), line_no=line_no))
        except orjson.JSONDecodeError as exc:
            out.append(DecideOutcome(line_no, None, "bad_line", error=f"line {line_no}: not "
                                     f"JSON ({exc})", kind="rejected"))
        except InputError as exc:
            out.append(DecideOutcome(line_no, None, "bad_line", error=exc.message,
                                     kind=exc.kind))
    return out


async def _decide_one(decision: Decision, line_no: int, settings: ReadSettings,
                      tokenizer: TextTokenizer, upstream: Upstream,
                      images: ImagePolicy | None) -> DecideOutcome:
    from app.runs.answer import answer_decision

    try:
        decided = await answer_decision(decision, settings, tokenizer, upstream,
                                        image_policy=images)
    except InputError as exc:
        return DecideOutcome(line_no, decision.id, "rejected", error=exc.message, kind=exc.kind)
    except UpstreamError as exc:
        return DecideOutcome(line_no, decision.id, "failed", error=exc.message, kind=exc.kind)
    return DecideOutcome(line_no, decision.id, "done", answers=decided.answers)


async def decide_all(items: Sequence[Decision | DecideOutcome], settings: ReadSettings,
                     tokenizer: TextTokenizer, upstream: Upstream, *,
                     images: ImagePolicy | None = None) -> list[DecideOutcome]:
    """Answer every decision concurrently (bad lines pass through), in input order; a
    decision's images are fetched under ``images`` (by default: no local file)."""
    import asyncio

    async def _one(index: int, item: Decision | DecideOutcome) -> DecideOutcome:
        if isinstance(item, DecideOutcome):
            return item
        return await _decide_one(item, index + 1, settings, tokenizer, upstream, images)

    return list(await asyncio.gather(*(_one(i, item) for i, item in enumerate(items))))


async def _run_decide(items: list[Decision | DecideOutcome], settings: ReadSettings, url: str,
                      timeout_s: float, choice: UpstreamConfig, images: ImagePolicy,
                      ) -> tuple[list[DecideOutcome], ServerFingerprint]:
    tokenizer = direct_tokenizer(settings.tokenizer)
    upstream = direct_upstream(url, settings, choice)
    try:
        await upstream.wait_ready(timeout_s=timeout_s)
        fingerprint = await upstream.fingerprint()
        outcomes = await decide_all(items, settings, tokenizer, upstream, images=images)
    finally:
        await upstream.aclose()
    return outcomes, fingerprint


def _single(state: str, question: str, qtype: str, options: list[str]) -> Decision:
    names = [o.strip() for opt in options for o in opt.split(",") if o.strip()]
    spec: dict[str, Any] = {"type": qtype, "instructions": question}
    kind = kind_named(qtype)
    if names and not kind.takes_options:
        named = either(tuple(k.name for k in all_kinds() if k.takes_options))
        raise InputError(f"--options is for --type {named}; {qtype} labels are "
                         f"{'/'.join(kind.parse_criteria(None)[0])}")
    criteria = kind.criteria_from_names(names)
    if criteria is not None:
        spec["criteria"] = criteria
    return parse_decision({"id": "cli", "state": state, "questions": {"q": spec}})


def _items(file: Path | None, state: str | None, question: str | None, qtype: str,
           options: list[str]) -> list[Decision | DecideOutcome]:
    if file is not None and (state is not None or question is not None):
        raise InputError("give a FILE or --state with --question, not both")
    if file is not None:
        from app.runs.jobfile import read_job_file

        return _load_numbered(read_job_file(file))
    if state is None or question is None:
        raise InputError("give a JSONL FILE, or --state TEXT and --question TEXT")
    return [_single(state, question, qtype, options)]


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


#: Printed once under the tables of ``dreads decide``.
_LEGEND = ("P: P(yes) for noul, else the answer's probability; mass: label mass, mean/min over "
           "the draws; argmax: the top token was a label; H: entropy; stop: why the draws "
           "stopped")
#: The numeric columns: never wrapped (the question and the answer wrap instead).
_FIGURES = ("P", "mass", "argmax", "H", "stderr", "agree", "draws", "stop")


def _answers_table(outcome: DecideOutcome) -> Table:
    from rich import box

    table = Table(title=f"decision {outcome.decision_id} (line {outcome.line_no})",
                  title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  padding=0)
    table.add_column("question", overflow="fold", min_width=8)
    table.add_column("answer", overflow="fold", min_width=6)
    for column in _FIGURES:
        table.add_column(column, no_wrap=True,
                         justify="left" if column in ("argmax", "stop") else "right")
    for a in outcome.answers:
        prob = a.p_yes if a.p_yes is not None else a.top_prob
        mass = f"{a.label_mass:.2f}/{a.min_label_mass:.2f}"
        table.add_row(escape(a.question_id), escape(f"{a.option} ({a.label})"), _fmt(prob), mass,
                      "yes" if a.argmax_is_label else "[red]no[/red]", _fmt(a.entropy, 2),
                      _fmt(a.stderr), _fmt(a.agreement, 2), str(a.draws), str(a.stop_reason))
    return table


def _print_outcomes(outcomes: list[DecideOutcome], fingerprint: ServerFingerprint) -> None:
    label = " (SIMULATOR)" if is_simulator(fingerprint=fingerprint) else ""
    console.print(f"upstream: {fingerprint.model_id}{label}, canvas {fingerprint.canvas_length}",
                  highlight=False)
    for outcome in outcomes:
        if outcome.status == "done":
            console.print(_answers_table(outcome))
        else:
            where = f"line {outcome.line_no}" + (f" ({outcome.decision_id})"
                                                 if outcome.decision_id else "")
            err_console.print(f"[red]{outcome.status}[/red] {escape(where)}: "
                              f"{escape(outcome.error or '')}",
                              highlight=False)
    if any(outcome.status == "done" for outcome in outcomes):
        console.print(_LEGEND, highlight=False, style="dim")


def _outcome_json(outcome: DecideOutcome) -> dict[str, Any]:
    return {"line": outcome.line_no, "id": outcome.decision_id, "status": outcome.status,
            "kind": outcome.kind, "error": outcome.error,
            "answers": [asdict(a) for a in outcome.answers]}


def _exit_code(outcomes: list[DecideOutcome]) -> int:
    statuses = {o.status for o in outcomes}
    if "failed" in statuses:
        return EXIT_FAILURE
    return EXIT_USAGE if statuses & {"rejected", "bad_line"} else EXIT_OK


@app.command("decide", rich_help_panel=SERVERS)
@with_read_options(only=("policy", "draws", "threshold", "max_draws", "mode", "layout",
                         "endpoint", "seed", "model", "tokenizer", "canvas"))
def decide(
    file: Annotated[Path | None, typer.Argument(
        metavar="FILE", show_default=False, readable=False,
        help="JSONL decisions (one per line).")] = None,
    state: Annotated[str | None, typer.Option(help="The state (document) of one decision.")]
    = None,
    question: Annotated[str | None, typer.Option(help="The question's instructions.")] = None,
    qtype: Annotated[str, typer.Option("--type", help=" | ".join(kind_names()) + ".")]
    = kind_names()[0],
    options: Annotated[list[str] | None, typer.Option(
        "--options", help="Choice options / score levels (repeat, or comma-separated).")]
    = None,
    upstream: UpstreamOpt = None,
    given: ReadGiven = NOT_GIVEN,
    timeout: WaitOpt = DEFAULT_WAIT_S,
    json_out: JsonOpt = False,
    engine: EngineOpt = None, device: DeviceOpt = None, dtype: DtypeOpt = None,
) -> None:
    """Answer a few decisions straight from an upstream, no database: answers and diagnostics.

    Per question: the answer, P, label mass, argmax-is-label, entropy, stderr, agreement, draws
    used and why the draws stopped. With --draws 1 (and the default layout and seed) a
    decision's answer is the one vLLM's own /v1/systemone gives on the same server.
    """
    import asyncio

    if qtype not in kind_names():
        err_console.print(f"[red]error:[/red] --type must be {either(kind_names())}, not "
                          f"{qtype!r}")
        raise typer.Exit(EXIT_USAGE)
    overrides = dict(given)
    from app.config import run_env

    env = run_env()
    url = upstream
    try:
        choice = resolve_engine(None, engine=engine, device=device, dtype=dtype, env=env)
        settings = base_read_settings(overrides, env=env, engine=choice.engine)
        url = direct_target(upstream, choice, settings, env)
        items = _items(file, state, question, qtype, options or [])
        settings = asyncio.run(wait_served_settings(url, settings, overrides, choice, timeout,
                                                    env=env))
        outcomes, fingerprint = asyncio.run(_run_decide(items, settings, url, timeout, choice,
                                                        image_policy(env)))
    except DreadsError as exc:
        exit_error(exc, exc.exit_code, where="" if exc.exit_code == EXIT_USAGE else f"{url}: ")
    if json_out:
        payload = {"upstream": asdict(fingerprint),
                   "decisions": [_outcome_json(o) for o in outcomes]}
        typer.echo(orjson.dumps(payload, default=dict).decode())
    else:
        _print_outcomes(outcomes, fingerprint)
    raise typer.Exit(_exit_code(outcomes))
