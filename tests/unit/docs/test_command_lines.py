"""Every ``dreads`` command line the README and docs/*.md show names a command and options
that exist: each is checked against the CLI's own Click tree.

Command lines are collected from fenced code blocks (after ``$ `` prompts where a block has
them, otherwise every line of a shell block; ``\\`` continuations joined; ``&&``, ``||``, ``;``,
``|`` and ``&`` split; ``NAME=value`` prefixes, ``$(...)``, redirections and ``# comments``
left out; ``docker compose exec|run SERVICE dreads ...`` included) and from inline code spans
that start with ``dreads``. Upper-case placeholders (``FILE``, ``RUN``) are positional
arguments, which is fine; a positional where a command group expects a subcommand is not.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

import app.cli  # noqa: F401  (the command modules register on import)
from app.cli import _app
from app.cli._typer import OPTION_ALIASES

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Blocks whose lines are never commands, only their ``$ `` prompt lines.
NOT_SHELL = {"json", "jsonl", "python", "text", "yaml", "toml", "ini", "dockerfile", "html"}
SEPARATORS = {"&&", "||", ";", "|", "&", ";;"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: A line that runs dreads, roughly (to tell a broken command line from prose in a code block).
RUNS_DREADS = re.compile(r"(?:^|&&|\|\||[;|])\s*(?:[A-Za-z_]\w*=\S*\s+)*(?:\S*/)?dreads(?:\s|$)")
#: Options passed through to Celery or Flower that the docs may show (none today).
PASSED_THROUGH: dict[str, set[str]] = {"dreads worker": set(), "dreads flower": set()}


@dataclass(frozen=True)
class Shown:
    """A command line as a page shows it."""

    page: Path
    number: int
    text: str

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.number}"


# -- collecting ------------------------------------------------------------------------------

def _uncomment(line: str) -> str:
    """``line`` without a shell comment (a ``#`` that starts a word, outside quotes)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _joined(lines: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Physical lines joined at ``\\`` continuations: (first line number, text)."""
    start, parts = 0, list[str]()
    for number, line in lines:
        text = _uncomment(line).rstrip()
        if not parts:
            start = number
        if text.endswith("\\"):
            parts.append(text[:-1])
            continue
        parts.append(text)
        yield start, " ".join(parts)
        parts = []
    if parts:
        yield start, " ".join(parts)


def _prompted(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The ``$ `` lines of a block, each with the lines its ``\\`` continues onto."""
    out: list[tuple[int, str]] = []
    going = False
    for number, line in lines:
        if line.lstrip().startswith("$ "):
            out.append((number, line.lstrip()[2:]))
        elif going:
            out.append((number, line))
        else:
            continue
        going = line.rstrip().endswith("\\")
    return out


def _block_lines(language: str, lines: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    prompted = _prompted(lines)
    if prompted or language.lower() in NOT_SHELL:
        yield from _joined(prompted)
    else:
        yield from _joined(lines)


def fenced_lines(page: Path) -> Iterator[Shown]:
    """Candidate command lines of the fenced code blocks of ``page``."""
    language: str | None = None
    block: list[tuple[int, str]] = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"^\s*```(\S*)", line)
        if fence and language is None:
            language, block = fence[1], []
        elif fence:
            for start, text in _block_lines(language or "", block):
                yield Shown(page, start, text)
            language = None
        elif language is not None:
            block.append((number, line))


def inline_lines(page: Path) -> Iterator[Shown]:
    """Inline code spans outside fenced blocks that start with ``dreads``."""
    inside = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if re.match(r"^\s*```", line):
            inside = not inside
            continue
        if not inside:
            for span in re.findall(r"`(dreads [^`]+)`", line):
                yield Shown(page, number, span.replace("[", " ").replace("]", " "))


def _substituted(text: str) -> str:
    """``text`` with every ``$(...)`` (nested parentheses too) replaced by a word."""
    while (start := text.find("$(")) >= 0:
        depth, end = 0, len(text)
        for i in range(start + 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                end = i
                break
        text = text[:start] + "SUBSTITUTED" + text[end + 1:]
    return text


def _segments(text: str) -> Iterator[list[str]]:
    lexer = shlex.shlex(_substituted(text), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    segment: list[str] = []
    for token in lexer:
        if token in SEPARATORS:
            yield segment
            segment = []
        else:
            segment.append(token)
    yield segment


def _without_redirections(tokens: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
        elif re.fullmatch(r"[<>&]+", token) and re.search(r"[<>]", token):
            if out and out[-1].isdigit():
                out.pop()
            skip = True
        else:
            out.append(token)
    return out


def _dreads_args(tokens: list[str]) -> list[str] | None:
    """The arguments after ``dreads`` when ``tokens`` run it, else None."""
    while tokens and ASSIGNMENT.match(tokens[0]):
        tokens = tokens[1:]
    if tokens[:2] == ["docker", "compose"] and tokens[2:3] in (["exec"], ["run"]):
        rest = tokens[3:]
        while rest and rest[0].startswith("-"):
            rest = rest[1:]
        tokens = rest[1:]  # the service
    if tokens and Path(tokens[0]).name == "dreads":
        return _without_redirections(tokens[1:])
    return None


def command_lines() -> list[tuple[Shown, list[str]]]:
    """Every shown ``dreads`` invocation with its arguments (a line the shell could not split
    is one with the arguments ``["--unparsable-line"]``, which no command has)."""
    found = []
    for page in PAGES:
        for shown in (*fenced_lines(page), *inline_lines(page)):
            if "dreads" not in shown.text:
                continue
            try:
                segments = list(_segments(shown.text))
            except ValueError:  # an unclosed quote: prose, unless it starts like a command
                if RUNS_DREADS.search(shown.text.strip()):
                    found.append((shown, ["--unparsable-line"]))
                continue
            for segment in segments:
                args = _dreads_args(segment)
                if args is not None:
                    found.append((shown, args))
    return found


# -- checking against the Click tree -----------------------------------------------------------
# Typer builds the tree with its own copy of Click (``typer._click``), so commands and parameters
# are told apart by what they have, not by Click's classes.

def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


#: Click's own help option, on every command.
HELP = {"--help": None}


def _names(command: Any) -> dict[str, Any]:
    names: dict[str, Any] = dict(HELP)
    for param in command.params:
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("-"):
                names[name] = param
    for alias, target in OPTION_ALIASES.items():  # hidden spellings of a documented option
        if target in names and alias not in names:
            names[alias] = names[target]
    return names


def _takes_value(param: Any) -> bool:
    return param is not None and not (getattr(param, "is_flag", False)
                                      or getattr(param, "count", False))


def _arity(command: Any) -> int | None:
    """How many positional arguments the command takes (None: any number)."""
    if command.allow_extra_args:
        return None
    total = 0
    for param in command.params:
        if _is_argument(param):
            if param.nargs < 0:
                return None
            total += param.nargs
    return total


def check(args: list[str], root: Any) -> list[str]:
    """What is wrong with ``dreads ARGS``: unknown commands and options, extra arguments."""
    command = root
    path, problems, positionals = "dreads", [], 0
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            name, eq, _ = arg.partition("=")
            names = _names(command)
            param = names.get(name)
            if name not in names:
                if name not in PASSED_THROUGH.get(path, set()):
                    problems.append(f"`{path}` has no option {name}")
            elif _takes_value(param) and not eq:
                i += 1
            continue
        if _is_group(command):
            sub = command.commands.get(arg)
            if sub is None:
                problems.append(f"`{path}` has no command {arg!r}")
                break
            command, path = sub, f"{path} {arg}"
            continue
        positionals += 1
    arity = _arity(command)
    if arity is not None and positionals > arity:
        problems.append(f"`{path}` takes {arity} argument(s), the line gives {positionals}")
    return problems


@pytest.fixture(scope="module")
def root() -> Any:
    command = typer.main.get_command(_app.app)
    assert _is_group(command)
    return command


def test_every_command_line_in_the_docs_exists(root: Any) -> None:
    lines = command_lines()
    assert len(lines) > 100, f"only {len(lines)} dreads command lines found: is the parser broken?"
    bad = [f"{shown.where()}: {problem}\n    {shown.text.strip()}"
           for shown, args in lines for problem in check(args, root)]
    assert not bad, "command lines that the CLI would refuse:\n" + "\n".join(bad)


def _path(args: list[str], root: Any) -> str:
    """The (sub)command a line runs: ``run``, ``db upgrade`` ("" for ``dreads`` alone)."""
    command, words = root, []
    for arg in (a for a in args if not a.startswith("-")):
        if not _is_group(command) or arg not in command.commands:
            break
        command = command.commands[arg]
        words.append(arg)
    return " ".join(words)


def _leaves(group: Any, prefix: str = "") -> set[str]:
    out = set()
    for name, command in group.commands.items():
        if _is_group(command):
            out |= _leaves(command, f"{prefix}{name} ")
        else:
            out.add(prefix + name)
    return out


def test_every_command_is_shown_somewhere(root: Any) -> None:
    """Each command and subcommand of ``dreads --help`` appears in at least one line."""
    shown = {_path(args, root) for _, args in command_lines()}
    missing = _leaves(root) - shown
    assert not missing, f"commands no docs line shows: {sorted(missing)}"


@pytest.mark.parametrize(("line", "problem"), [
    ("dreads run examples/small.jsonl --no-such-option", "`dreads run` has no option"),
    ("dreads report contracts --html=r.html --wat", "`dreads report` has no option --wat"),
    ("dreads frobnicate x", "has no command 'frobnicate'"),
    ("dreads db downgrade", "`dreads db` has no command 'downgrade'"),
    ("dreads sim --db x.db", "`dreads sim` has no option --db"),
    ("dreads status a b", "takes 1 argument(s)"),
])
def test_a_bad_line_is_caught(root: Any, line: str, problem: str) -> None:
    (segment,) = list(_segments(line))
    args = _dreads_args(segment)
    assert args is not None
    assert any(problem in p for p in check(args, root)), check(args, root)


@pytest.mark.parametrize("line", [
    "DREADS_X=1 .venv/bin/dreads run f.jsonl --upstream sim --db d.db --constrained",
    "dreads run f.jsonl --unconstrained --json > out.json 2>&1",
    "docker compose exec worker dreads status eval-1 --watch",
    "dreads worker -c 2 --answers",
    "dreads delete r -y",
    "dreads db upgrade --database-url x.db",
    "dreads engine make-tiny OUT",
    "KEY=$(python3 -c \"print(secrets.token_urlsafe(32))\") dreads serve --insecure",
])
def test_a_good_line_passes(root: Any, line: str) -> None:
    (args,) = [a for s in _segments(line) if (a := _dreads_args(s)) is not None]
    assert check(args, root) == []


def test_lines_are_collected_the_way_a_shell_reads_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```bash\n"
                    "python3 -m venv .venv && .venv/bin/dreads run a.jsonl \\\n"
                    "  --upstream sim   # the simulator's answers\n"
                    "dreads report a --html r.html#top\n"
                    "```\n"
                    "```text\n$ dreads status a \\\n    --json\n"
                    "dreads serve: not a command line\n```\n"
                    "Run `dreads resume RUN [--retry-failed]`.\n", encoding="utf-8")
    texts = [s.text for s in (*fenced_lines(page), *inline_lines(page))]
    assert [a for t in texts for s in _segments(t) if (a := _dreads_args(s)) is not None] == [
        ["run", "a.jsonl", "--upstream", "sim"], ["report", "a", "--html", "r.html#top"],
        ["status", "a", "--json"], ["resume", "RUN", "--retry-failed"]]
