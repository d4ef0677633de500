"""The run settings a user may give, declared once: each ``ReadSettings`` field's option on the
command line, its query parameter of ``POST /v1/runs``, its bounds, its help and what it
implies. ``app.cli.options`` makes the Typer options from this table, ``app.api.runs`` the
pydantic fields, ``app.runs.setting_names`` the words of a settings mismatch; nothing else
names a read option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.engine import Endpoint, Layout, PolicyName, ReadMode, source_names, source_spec

__all__ = ["ANSWER_PANEL", "READ_OPTIONS", "READ_PANEL", "REPLICATES", "ReadOption",
           "read_option", "read_overrides"]

READ_PANEL = "Run settings"  #: the --help panel of the read settings
ANSWER_PANEL = "Who answers (run settings)"  #: ... and of who answers


@dataclass(frozen=True)
class ReadOption:
    """One run setting a user may give (``None``: not given)."""

    name: str  #: the command's parameter, and the API's query parameter
    field: str  #: the ``ReadSettings`` field it sets
    kind: type  #: its value: int, float, str, bool or one of the engine's enums
    flags: str  #: the option's declaration (``--constrained/--unconstrained``: both ways)
    help: str  #: the ``--help`` line
    minimum: int | float | None = None  #: the least value (Typer ``min``, pydantic ``ge``)
    api: bool = True  #: a query parameter of ``POST /v1/runs`` (False: the server's own)
    api_help: str | None = None  #: its description in the API's schema
    api_min_length: int | None = None  #: the API refuses a shorter string
    answers: bool = False  #: says who answers (``run``, ``submit``, ``resume``; not ``serve``)
    url: bool = False  #: names a server: checked as an address on the command line
    source: bool = False  #: names an answer source: one of the registry's (or a plugin's)
    implies: tuple[str, Any] | None = None  #: given alone, it also sets this field to this

    @property
    def option(self) -> str:
        """The option as a user types it: ``--constrained`` of ``--constrained/...``."""
        return self.flags.split("/")[0]

    @property
    def param(self) -> str | None:
        """The query parameter of ``POST /v1/runs`` (None: the server's own setting)."""
        return self.name if self.api else None

    @property
    def panel(self) -> str:
        return ANSWER_PANEL if self.answers else READ_PANEL


def _sources_said() -> str:
    """The answer sources, as ``--answer-by``'s help and the API's description say them."""
    specs = [source_spec(name) for name in source_names()]
    said = [f"{s.name} ({s.summary})" for s in specs if s.plans_reads]
    endpoints = [s for s in specs if not s.plans_reads]
    said.append(" or ".join(s.name for s in endpoints) + " (a decision endpoint at "
                "--answer-url: one request per decision, one draw per question; "
                + ", ".join(f"{s.name}: {s.path}" for s in endpoints) + ")")
    return ", ".join(said) + ", or an installed plugin's source"


_ANSWER_BY_HELP = (
    f"Who answers the run's decisions: {_sources_said()}. Its API key comes from "
    "DREADS_ANSWER_API_KEY only; DREADS_ANSWER_TIMEOUT_S (120) and DREADS_ANSWER_GIVE_UP_S "
    "(300: how long 429/5xx are retried) tune it.")
_ANSWER_BY_API = ("Who answers: " + ", ".join(
    f"{name} ({source_spec(name).summary})" for name in source_names())
    + ", or an installed plugin's source. A decision endpoint's source sends one request per "
    "decision.")

#: Every read setting a user may give, in the order of ``--help``.
READ_OPTIONS: tuple[ReadOption, ...] = (
    ReadOption("model", "model", str, "--model", "Served model name.", api_min_length=1,
               api_help="The endpoint's model, for a run answered by a decision endpoint "
               "(default: this server's)."),
    ReadOption("tokenizer", "tokenizer", str, "--tokenizer",
               "Tokenizer: hub id, path or 'standin'.", api=False),
    ReadOption("canvas", "canvas_length", int, "--canvas", "Served canvas length.", minimum=16,
               api=False),
    ReadOption("canvas_step", "canvas_step", int, "--canvas-step",
               "Canvas width step (default 16).", minimum=1),
    ReadOption("layout", "layout", Layout, "--layout", "Prompt layout."),
    ReadOption("mode", "read_mode", ReadMode, "--mode",
               "isolated: one question per read (default); joint: shared."),
    ReadOption("policy", "policy", PolicyName, "--policy", "Draw policy."),
    ReadOption("draws", "fixed_draws", int, "--draws",
               "N draws for the fixed policy (implies --policy fixed).", minimum=1,
               api_help="N draws (implies policy=fixed).", implies=("policy", PolicyName.FIXED)),
    ReadOption("threshold", "threshold", float, "--threshold",
               "Agreement / entropy threshold (0.1).", minimum=0.0),
    ReadOption("max_draws", "max_draws", int, "--max-draws", "Most draws per question (4).",
               minimum=1),
    ReadOption("steps", "steps", int, "--steps", "Denoise steps per read (1).", minimum=1),
    ReadOption("constrained", "constrained", bool, "--constrained/--unconstrained",
               "Constrained reads (server support)."),
    ReadOption("endpoint", "endpoint", Endpoint, "--endpoint", "vLLM endpoint."),
    ReadOption("seed", "seed", int, "--seed", "Run seed (noise)."),
    ReadOption("answer_by", "answer_by", str, "--answer-by", _ANSWER_BY_HELP,
               answers=True, source=True, api_help=_ANSWER_BY_API),
    ReadOption("answer_url", "answer_url", str, "--answer-url",
               "Base URL of the decision endpoint (vLLM, a hosted API, another dreads serve; "
               "'sim' for the built-in simulator). Default: the run's --upstream, so vLLM's own "
               "reader on the same pod.", answers=True, url=True,
               api_help="The decision endpoint's base URL (default: this server's upstream). "
               "Its key is the server's DREADS_ANSWER_API_KEY."),
    ReadOption("answer_rps", "answer_rps", float, "--answer-rps",
               "Budget: requests per second to the endpoint (0: no limit, the default), per "
               "process answering the run. Not hashed: resume may change it.", minimum=0.0,
               answers=True, api_help="Budget: requests per second."),
    ReadOption("answer_concurrency", "answer_concurrency", int, "--answer-concurrency",
               "Budget: requests in flight to the endpoint (16), per process answering the "
               "run. Not hashed: resume may change it.", minimum=1, answers=True,
               api_help="Budget: in flight."),
)

#: A run's replicate count: a run setting beside ``ReadSettings`` (``run``, ``submit``, the API).
REPLICATES = ReadOption("replicates", "replicates", int, "--replicates",
                        "Copies of each decision with different noise (1).", minimum=1)

_BY_NAME: dict[str, ReadOption] = {option.name: option for option in READ_OPTIONS}


def read_option(name: str) -> ReadOption:
    """The read option whose parameter is ``name`` (``draws``).

    Raises:
        KeyError: no read option has that name.
    """
    return _BY_NAME[name]


def read_overrides(given: Mapping[str, Any] | None = None, /, **named: Any) -> dict[str, Any]:
    """The ``ReadSettings`` fields the user gave (``None``: not given), by their field names,
    from read options by their parameter names (``draws=3`` -> ``fixed_draws``, and
    ``policy`` fixed unless given too).

    Raises:
        TypeError: a name that is no read option.
    """
    values = {**(given or {}), **named}
    unknown = set(values) - set(_BY_NAME)
    if unknown:
        raise TypeError(f"not read options: {', '.join(sorted(unknown))}")
    chosen = {_BY_NAME[name].field: value for name, value in values.items()
              if value is not None}
    for name, value in values.items():
        implied = _BY_NAME[name].implies
        if value is not None and implied is not None:
            chosen.setdefault(implied[0], implied[1])
    return chosen
