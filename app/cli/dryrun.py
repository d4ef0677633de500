"""``submit --dry-run`` and ``run --dry-run``: the estimate before spending.

The file is read, validated and planned as a submit would (``app.runs.dryrun``), with the
run's settings and tokenizer; nothing is stored and nothing is queued: no database is opened
or created and no broker is contacted. Model and tokenizer set nowhere are asked of the server
as a real run asks; ``--model`` and ``--tokenizer`` avoid that.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from app.cli import _render as render
from app.cli.options import ReadGiven, cli_errors, console, err_console
from app.connect.plugins import find_source
from app.engine import plans_reads
from app.errors import EXIT_USAGE, ConfigError, UpstreamUnavailable

if TYPE_CHECKING:
    from app.engine import Estimate, Prices, ReadSettings, Span
    from app.images import ImagePolicy
    from app.runs.dryrun import DryRunReport

__all__ = ["DryRunArgs", "DryRunOpt", "GpuPriceHourOpt", "MaxCostOpt", "PriceInputOpt",
           "PriceOutputOpt", "ReadsPerSecondOpt", "Spend", "dry_run_command"]

_PANEL = "Estimate (--dry-run)"
_SPEND_PANEL = "Spend and budget"

DryRunOpt = Annotated[bool, typer.Option(
    "--dry-run", help="Estimate, store nothing: validate the file as a submit does, then print "
    "the decisions, the reads from the least to the most draws, the prompt tokens (counted "
    "with the run's tokenizer) and, with prices, the cost. No database is opened, nothing is "
    "queued.", rich_help_panel=_PANEL)]
PriceInputOpt = Annotated[float | None, typer.Option(
    "--price-input", min=0.0, metavar="USD", help="Dollars per million input (prompt) tokens "
    "(DREADS_PRICE_INPUT_PER_MTOK): recorded with the run, its tokens' cost as they are "
    "spent; and --dry-run's cost.", rich_help_panel=_SPEND_PANEL)]
PriceOutputOpt = Annotated[float | None, typer.Option(
    "--price-output", min=0.0, metavar="USD", help="Dollars per million output tokens "
    "(DREADS_PRICE_OUTPUT_PER_MTOK): recorded with the run; and --dry-run's cost.",
    rich_help_panel=_SPEND_PANEL)]
GpuPriceHourOpt = Annotated[float | None, typer.Option(
    "--gpu-price-hour", min=0.0, metavar="USD", help="A GPU pod's dollars per hour "
    "(DREADS_GPU_PRICE_HOUR): --dry-run's cost with --reads-per-second; with dreads run, "
    "this machine's read time is recorded at it (workers: set DREADS_GPU_PRICE_HOUR).",
    rich_help_panel=_SPEND_PANEL)]
MaxCostOpt = Annotated[float | None, typer.Option(
    "--max-cost", min=0.0, metavar="USD", help="The run's budget in dollars: once its "
    "recorded cost reaches it the run pauses (decisions in flight finish); raise it with "
    "dreads resume RUN --max-cost USD.", rich_help_panel=_SPEND_PANEL)]
ReadsPerSecondOpt = Annotated[float | None, typer.Option(
    "--reads-per-second", min=0.0, metavar="RATE", help="Reads per second measured on that "
    "GPU (a finished run's draw rows / its time), for --dry-run's GPU time.",
    rich_help_panel=_PANEL)]


@dataclass(frozen=True)
class Spend:
    """The estimate options of a command (None: not given)."""

    price_input: float | None = None
    price_output: float | None = None
    gpu_price_hour: float | None = None
    reads_per_second: float | None = None
    max_cost: float | None = None

    def require_dry_run(self, dry_run: bool, *, embedded: bool = False) -> None:
        """Refuse a flag that would be silently unused: ``--reads-per-second`` only prices
        the estimate; ``--gpu-price-hour`` on a submit (the workers' pods are priced where
        they run: ``DREADS_GPU_PRICE_HOUR``); ``--max-cost`` on an estimate."""
        if dry_run:
            if self.max_cost is not None:
                with cli_errors():
                    raise ConfigError("--max-cost is a run's budget and --dry-run runs "
                                      "nothing; leave one of them out")
            return
        given = [flag for flag, value in (
            ("--reads-per-second", self.reads_per_second),
            *(() if embedded else (("--gpu-price-hour", self.gpu_price_hour),)))
            if value is not None]
        if given:
            where = "" if embedded else ("; a worker's pod is priced by DREADS_GPU_PRICE_HOUR "
                                         "where the worker runs")
            with cli_errors():
                raise ConfigError(f"{', '.join(given)} only price --dry-run's estimate{where}; "
                                  "add --dry-run, or leave them out to run")

    def recorded(self) -> dict[str, float | None]:
        """What the run records: the token prices (flags over ``DREADS_PRICE_*``) and the
        budget (None: not given, left as the run has it)."""
        from app.config import settings_with

        env = settings_with(price_input_per_mtok=self.price_input,
                            price_output_per_mtok=self.price_output)
        return {"price_input_per_mtok": env.price_input_per_mtok,
                "price_output_per_mtok": env.price_output_per_mtok, "max_cost": self.max_cost}

    def prices(self) -> Prices:
        """The flags over ``DREADS_PRICE_*`` and ``DREADS_GPU_PRICE_HOUR``."""
        from app.config import settings_with
        from app.engine import Prices

        env = settings_with(price_input_per_mtok=self.price_input,
                            price_output_per_mtok=self.price_output,
                            gpu_price_hour=self.gpu_price_hour)
        return Prices(input_per_mtok=env.price_input_per_mtok,
                      output_per_mtok=env.price_output_per_mtok,
                      gpu_per_hour=env.gpu_price_hour, reads_per_s=self.reads_per_second or None)


@dataclass(frozen=True)
class DryRunArgs:
    file: Path
    run_name: str
    given: ReadGiven
    replicates: int | None
    strict: bool
    fail_on_bad_lines: bool
    upstream: str | None
    engine: dict[str, str | None]  #: engine, device, dtype as given
    json_out: bool
    spend: Spend
    image_dirs: str | None = None  #: --image-dirs as given


def _image_policy(image_dirs: str | None) -> ImagePolicy:
    """What the dry run may fetch as images: ``--image-dirs`` over ``DREADS_IMAGE_*``."""
    from app.config import run_env, settings_with
    from app.runs.settings import image_policy

    return image_policy(run_env(settings_with(image_dirs=image_dirs)))


def dry_run_command(args: DryRunArgs) -> None:
    """Estimate ``args.file`` and print it; exit 2 where a submit would store nothing, 3 with
    ``--fail-on-bad-lines`` and a bad or rejected line."""
    from app.runs.dryrun import DryRunRequest, dry_run
    from app.runs.jobfile import check_job_file

    with cli_errors():
        check_job_file(args.file)
        settings, replicates, tokenizer = _settings(args)
        request = DryRunRequest(path=args.file, run_name=args.run_name, settings=settings,
                                replicates=replicates, strict=args.strict,
                                prices=args.spend.prices(),
                                images=_image_policy(args.image_dirs))
        report = dry_run(request, tokenizer)
    if args.json_out:
        console.print_json(render.json_text(report.as_dict()))
    else:
        print_dry_run(report)
    if report.refused or not report.valid:
        raise typer.Exit(EXIT_USAGE)
    if args.fail_on_bad_lines and (report.bad or report.rejected):
        raise typer.Exit(render.BAD_LINES_EXIT)


def _settings(args: DryRunArgs) -> tuple[ReadSettings, int, Any]:
    """A new run's settings, as ``submit`` resolves them (the database is not read: an
    existing run of that name is not looked up). An endpoint's model only names it in the
    requests, so it is not asked for."""
    from app.cli._wiring import resolve_engine, resolve_settings
    from app.config import run_env

    env = run_env()
    given = dict(args.given)
    if not plans_reads(given.get("answer_by")):
        given.setdefault("model", env.model)
    choice = resolve_engine(None, env=env, **args.engine)
    try:
        return resolve_settings(None, given, args.replicates, env=env, engine=choice.engine,
                                upstream=args.upstream)
    except (ConfigError, UpstreamUnavailable) as exc:
        hint = (f"{exc.message}; or pass --model and --tokenizer (DREADS_MODEL, "
                "DREADS_TOKENIZER) to estimate without the server")
        if isinstance(exc, UpstreamUnavailable):
            raise UpstreamUnavailable(hint, kind=exc.kind) from exc
        raise ConfigError(hint) from exc


# -- printing --------------------------------------------------------------------------------

def print_dry_run(report: DryRunReport) -> None:
    if report.bad:
        err_console.print(render.problems_table(
            f"{len(report.bad)} bad line(s), would not be stored", report.bad))
    if report.rejected:
        err_console.print(render.problems_table(
            f"{len(report.rejected)} decision(s) the template cannot read (would be stored as "
            "rejected)", report.rejected))
    if report.refused:
        err_console.print("[red]--strict: a submit would refuse the file and write nothing.[/red]"
                          " Fix the lines above and try again.")
        return
    if not report.valid:
        err_console.print(f"[red]error:[/red] none of the {report.lines} line(s) is a valid "
                          "decision; a submit would store nothing. Fix the lines above and try "
                          "again.", soft_wrap=True)
        return
    for line in _head(report):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(_table(report.estimate(), report))
    for line in _notes(report):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def _head(report: DryRunReport) -> list[str]:
    s, tally = report.request.settings, report.tally
    name = escape(repr(report.request.run_name))
    first = (f"dry run of {name}: {report.lines} line(s), {report.valid} valid, "
             f"{len(report.rejected)} rejected; nothing stored, nothing queued")
    asked = (f"{tally.decisions} decision(s), {tally.questions} question(s), "
             f"{report.request.replicates} replicate(s)")
    if report.by_endpoint:
        who = (f"answered by the decision endpoint {s.answer_url} "
               f"({find_source(s.answer_by).path}): "
               f"one request per decision")
    else:
        draws = _span_text(report.estimate().draws, int_=True)
        who = (f"read by dreads: layout {s.layout.value}, {s.read_mode.value}, policy "
               f"{s.policy.value} ({draws} draw(s) per read), tokenizer {s.tokenizer}")
    return [first, f"{asked}; {who}"]


def _table(est: Estimate, report: DryRunReport) -> Table:
    table = Table(title="estimate", title_justify="left")
    for name in ("", "minimum", "maximum"):
        table.add_column(name, justify="left" if not name else "right")
    if report.by_endpoint:
        n = report.tally.decisions * report.request.replicates
        table.add_row("requests", f"{n:,}", f"{n:,}")
    rows: list[tuple[str, Span | None, str]] = [
        ("reads", est.reads, "n"), ("input tokens", est.input_tokens, "n"),
        ("output tokens", est.output_tokens, "n"), ("canvas tokens", est.canvas_tokens, "n"),
        ("cost at token prices", est.token_cost, "$"), ("GPU time", est.gpu_hours, "h"),
        ("GPU cost", est.gpu_cost, "$"),
    ]
    for label, span, unit in rows:
        if span is not None:
            table.add_row(label, _value(span.low, unit), _value(span.high, unit))
    return table


def _notes(report: DryRunReport) -> list[str]:
    tally, prices = report.tally, report.request.prices
    notes = [f"prompt tokens per read: {tally.prompt_min or 0} to {tally.prompt_max}; input "
             "tokens are the prompts, output tokens the canvas rows a server returns (its "
             "usage), canvas tokens what the GPU denoises (each read's whole canvas)"]
    if report.by_endpoint:
        notes.append(f"input and output tokens are estimated with the tokenizer "
                     f"{report.request.settings.tokenizer} as vLLM's reader lays the reads out "
                     "(one read per question); the endpoint's own tokenizer may count "
                     "differently")
        if report.unplanned:
            notes.append(f"{report.unplanned} decision(s) could not be laid out as vLLM's "
                         "reader would: not in the token counts")
    notes.append(_price_note(prices))
    return notes


def _price_note(prices: Prices) -> str:
    if prices.tokens_priced:
        text = (f"token prices: input {_per_mtok(prices.input_per_mtok)}, output "
                f"{_per_mtok(prices.output_per_mtok)} per million tokens")
    else:
        text = ("no token price given: tokens only (--price-input, --price-output: dollars "
                "per million tokens)")
    if prices.gpu_per_hour is not None and not prices.reads_per_s:
        text += ("; --gpu-price-hour needs --reads-per-second (a read rate measured on that "
                 "GPU) for a GPU cost")
    elif prices.gpu_per_hour is not None:
        text += f"; GPU ${prices.gpu_per_hour:g}/h at {prices.reads_per_s:g} reads/s"
    return text


def _per_mtok(price: float | None) -> str:
    return "not given (counted as $0)" if price is None else f"${price:g}"


def _value(value: float, unit: str) -> str:
    if unit == "$":
        return _dollars(value)
    if unit == "h":
        return render.duration(value * 3600.0)
    return f"{value:,.0f}"


def _dollars(value: float) -> str:
    return f"${value:,.2f}" if value >= 1.0 or value == 0.0 else f"${value:.2g}"


def _span_text(span: Span, *, int_: bool = False) -> str:
    low, high = (int(span.low), int(span.high)) if int_ else (span.low, span.high)
    return f"{low}" if low == high else f"{low} to {high}"
