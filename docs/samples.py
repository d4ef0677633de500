"""Regenerate the sample outputs shown in README.md and docs/*.md from real runs.

    .venv/bin/python docs/samples.py                  # rewrite every sample block in place
    .venv/bin/python docs/samples.py report status    # only these samples
    .venv/bin/python docs/samples.py --check          # exit 1 where a block's fields differ

Every sample runs the real command on the shipped examples against the simulator, in a
temporary directory, at a fixed terminal width (COLUMNS=100, NO_COLOR=1, TERM=dumb), with no
DREADS_* variable of the caller's shell. A sample block of a page sits between two markers and
is replaced whole:

    <!-- sample: NAME -->
    ```text
    $ dreads report contracts
    ...what the command printed...
    ```
    <!-- /sample -->

Long tables are cut to their first rows and the ``overall`` row (``trim_tables``); JSON bodies
are rounded to three decimals and laid out to fit 100 columns (``dump_json``).
``tests/unit/docs/test_samples.py`` runs the same commands and compares the *fields* of each
block (``fields``: column headers and row labels of tables, the keys of JSON bodies, the words
of the other lines), so a command that gains, loses or renames a column or key fails the test
until this script is run again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WIDTH = 100
TERMINAL = {"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"}
MARKER = re.compile(r"<!-- sample: (?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /sample -->",
                    re.DOTALL)

#: The decision the API samples send (the one the docs' curl examples show).
SYSTEMONE_BODY = {
    "model": "jev-latest",
    "state": "I was charged twice. Please refund me today.",
    "questions": {
        "billing": {"type": "noul", "instructions": "Is this message about billing?"},
        "tone": {"type": "choice", "criteria": {"angry": "upset or hostile", "calm": None}},
        "urgency": {"type": "score", "instructions": "How urgent?",
                    "criteria": ["Can wait", "This week", "Today"]},
    },
}
DECISIONS_BODY = {
    "model": "dgemma",
    "input": "I was charged twice. Please refund me today.",
    "questions": [
        {"type": "predicate", "name": "billing", "instructions": "The message is about billing."},
        {"type": "choice", "name": "tone", "instructions": "The tone of the message.",
         "choices": [{"value": "angry"}, {"value": "calm"}]},
        {"type": "score", "name": "urgency", "instructions": "How urgent is it?",
         "levels": [{"label": "Can wait"}, {"label": "Today"}]},
    ],
}
DECIDE_STATE = "Clause 2.1: payment within 30 days. Clause 9.3: payment within 45 days."
DECIDE_QUESTION = "Do these two clauses contradict each other?"


# -- running the commands -------------------------------------------------------------------

def dreads_command() -> list[str]:
    """The ``dreads`` of this interpreter's environment (the venv the docs are built with)."""
    beside = Path(sys.executable).with_name("dreads")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("dreads")
    if found is None:
        raise SystemExit("no dreads command: install the package (pip install -e .)")
    return [found]


def sample_env() -> dict[str, str]:
    """The caller's environment without DREADS_* settings, at the fixed terminal width."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREADS_")}
    env.pop("FORCE_COLOR", None)
    return {**env, **TERMINAL}


class Workspace:
    """A temporary directory holding a copy of ``examples/``, where the commands run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        shutil.copytree(ROOT / "examples", path / "examples",
                        ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        self.env = sample_env()
        self._server: tuple[subprocess.Popen[bytes], str] | None = None

    def dreads(self, *args: str, env: dict[str, str] | None = None) -> str:
        """What ``dreads ARGS`` prints (stdout and stderr together, in order), with ``env``
        over the workspace's environment."""
        out = subprocess.run([*dreads_command(), *args], cwd=self.path,
                             env={**self.env, **(env or {})},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=300, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"dreads {' '.join(args)} exited {out.returncode}:\n"
                               f"{out.stdout[-3000:]}")
        return out.stdout

    def server_url(self) -> str:
        """``dreads serve --upstream sim`` on a free port (started once, stopped by close)."""
        if self._server is None:
            port = _free_port()
            proc = subprocess.Popen(
                [*dreads_command(), "serve", "--upstream", "sim", "--sim-key",
                 "examples/small.key.jsonl", "--port", str(port), "--database-url", "serve.db"],
                cwd=self.path, env=self.env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
            self._server = (proc, f"http://127.0.0.1:{port}")
            _wait_ready(self._server[1], proc)
        return self._server[1]

    def post(self, route: str, body: Any, content_type: str = "application/json") -> Any:
        import httpx

        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = httpx.post(self.server_url() + route, content=data, timeout=60,
                              headers={"content-type": content_type})
        if response.status_code >= 300:
            raise RuntimeError(f"POST {route}: {response.status_code} {response.text}")
        return response.json()

    def close(self) -> None:
        if self._server is not None:
            proc = self._server[0]
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            self._server = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dreads serve exited {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).json().get("upstream_ready"):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise RuntimeError("dreads serve was not ready within 90 s")


@contextmanager
def workspace(path: Path | None = None) -> Iterator[Workspace]:
    """A ``Workspace`` in ``path`` (or a new temporary directory, removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="dreads-samples-") as tmp:
        ws = Workspace(Path(path or tmp))
        try:
            yield ws
        finally:
            ws.close()


# -- laying the output out -------------------------------------------------------------------

_TOP = ("┏", "┌")
_BOTTOM = "└"
_HEAD_END = "┡"


def _cells(line: str) -> list[str]:
    """The cells of a table line (between its vertical bars), stripped."""
    return [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]


def _logical_rows(rows: list[str]) -> list[list[str]]:
    """Body lines grouped into rows: a row goes on while its first cell is empty."""
    out: list[list[str]] = []
    for line in rows:
        cells = _cells(line)
        if out and (not cells or not cells[0]):
            out[-1].append(line)
        else:
            out.append([line])
    return out


def _ellipsis_row(line: str) -> str:
    """A body line with every cell blank and ``...`` in the first."""
    blank = re.sub(r"[^│]", " ", line)
    first = blank.index("│") + 2
    return blank[:first] + "..." + blank[first + 3:]


def _trim_body(body: list[str], keep: int) -> list[str]:
    rows = _logical_rows(body)
    kept = rows[:keep]
    tail = [r for r in rows[keep:] if _cells(r[0])[:1] == ["overall"]]
    if len(kept) + len(tail) == len(rows):
        return body
    return [*(x for r in kept for x in r), _ellipsis_row(body[0]), *(x for r in tail for x in r)]


def trim_tables(text: str, keep: int = 2) -> str:
    """``text`` with each table cut to its first ``keep`` rows, a ``...`` row and its
    ``overall`` row; trailing spaces removed."""
    lines = [line.rstrip() for line in text.splitlines()]
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith(_TOP):
            out.append(line)
            i += 1
            continue
        end = next(j for j in range(i, len(lines)) if lines[j].lstrip().startswith(_BOTTOM))
        table = lines[i:end]
        head = next((k + 1 for k, x in enumerate(table) if x.lstrip().startswith(_HEAD_END)), 1)
        out.extend([*table[:head], *_trim_body(table[head:], keep), lines[end]])
        i = end + 1
    return "\n".join(out).strip("\n")


def dump_json(value: Any) -> str:
    """JSON rounded to three decimals; an object or list that does not fit on one line has
    its short items packed several to a line, its long ones laid out the same way below."""
    return _dump(_rounded(value), 0)


def _dump(value: Any, indent: int) -> str:
    flat = json.dumps(value, ensure_ascii=False)
    limit = WIDTH - 4
    if indent + len(flat) <= limit or not isinstance(value, dict | list) or not value:
        return flat
    if isinstance(value, dict):
        parts = [f"{json.dumps(k, ensure_ascii=False)}: {_dump(v, indent + 2)}"
                 for k, v in value.items()]
        opening, closing = "{", "}"
    else:
        parts = [_dump(v, indent + 2) for v in value]
        opening, closing = "[", "]"
    pad = " " * (indent + 2)
    lines: list[str] = []
    for part in parts:
        joined = f"{lines[-1]}, {part}" if lines and "\n" not in lines[-1] else None
        if "\n" not in part and joined is not None and len(pad) + len(joined) + 1 <= limit:
            lines[-1] = joined
        else:
            lines.append(part)
    body = ",\n".join(pad + line for line in lines)
    return f"{opening}\n{body}\n{' ' * indent}{closing}"


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def fence(language: str, text: str) -> str:
    return f"```{language}\n{text.rstrip()}\n```\n"


def terminal(command: str, output: str, keep: int = 2) -> str:
    """A ``text`` block: the command after a ``$`` prompt, then its output (tables cut)."""
    return fence("text", f"$ {command}\n{trim_tables(output, keep)}")


# -- the samples -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    """One sample block: its name (the marker's), the page it is on, how to make it."""

    name: str
    page: str
    make: Callable[[Workspace], str]


def _shell(ws: Workspace, command: str, keep: int = 2) -> str:
    """A ``terminal`` block of one dreads command line (run without a shell)."""
    import shlex

    args = shlex.split(command)
    return terminal(command, ws.dreads(*args[1:]), keep)


def _run(ws: Workspace) -> str:
    return _shell(ws, "dreads run examples/contracts.jsonl --upstream sim")


def _submit_dry_run(ws: Workspace) -> str:
    return _shell(ws, "dreads submit examples/contracts.jsonl --run hosted --dry-run "
                  "--answer-by decisions --answer-url https://api.openai.com/v1 --model MODEL "
                  "--tokenizer standin --price-input 0.10", keep=50)


def _report(ws: Workspace) -> str:
    return _shell(ws, "dreads report contracts")


#: where ``report --against``'s comparison ends and run A's report begins
_A_FOLLOWS = re.compile(r"^the report of .* \(a\) follows$", re.MULTILINE)
#: how the simulator reads joint canvases in the comparison sample (``dreads sim``)
_INTERFERENCE = {"DREADS_SIM_JOINT_INTERFERENCE": "0.6"}


def _comparison(ws: Workspace, command: str) -> str:
    """A ``terminal`` block of ``dreads report A --against B`` up to where A's report begins."""
    import shlex

    output = ws.dreads(*shlex.split(command)[1:])
    end = _A_FOLLOWS.search(output)
    return terminal(command, output[:end.end()] if end else output, keep=8)


def _report_against(ws: Workspace) -> str:
    """Joint (with the simulator's joint interference) against isolated reads of the tickets,
    then the same settings with another seed: the noise check."""
    runs = [("dreads run examples/tickets.jsonl --upstream sim --run tickets", {}),
            ("dreads run examples/tickets.jsonl --upstream sim --run tickets-joint --mode joint",
             _INTERFERENCE),
            ("dreads run examples/tickets.jsonl --upstream sim --run tickets-seed --seed 13", {})]
    shown = []
    for command, env in runs:
        ws.dreads(*command.split()[1:], "--json", env=env)
        shown.append("".join(f"{k}={v} " for k, v in env.items()) + command)
    head = fence("text", "".join(f"$ {line}\n" for line in shown))
    return (head + "\n" + _comparison(ws, "dreads report tickets --against tickets-joint")
            + "\n" + _comparison(ws, "dreads report tickets --against tickets-seed"))


def _report_html(ws: Workspace) -> str:
    return _shell(ws, "dreads report contracts --html report.html")


def _status(ws: Workspace) -> str:
    return _shell(ws, "dreads status contracts")


def _runs(ws: Workspace) -> str:
    return _shell(ws, "dreads runs")


def _decide(ws: Workspace) -> str:
    import shlex

    shown = (f"dreads decide --state {shlex.quote(DECIDE_STATE)} \\\n"
             f"    --question {shlex.quote(DECIDE_QUESTION)} --upstream sim")
    args = shlex.split(shown.replace("\\\n", " "))
    return terminal(shown, ws.dreads(*args[1:]))


def _check_upstream(ws: Workspace) -> str:
    return _shell(ws, "dreads check-upstream sim", keep=50)


def _curl_json(route: str, body: Any) -> str:
    text = dump_json(body).replace("'", "'\\''")
    return (f'curl -H "$AUTH" "$API{route}" -H \'content-type: application/json\' -d \'\n'
            f"{text}'")


def _systemone(ws: Workspace) -> str:
    answer = ws.post("/v1/systemone", SYSTEMONE_BODY)
    return fence("bash", _curl_json("/v1/systemone", SYSTEMONE_BODY)) + "\n" + fence(
        "json", dump_json(answer))


def _decisions(ws: Workspace) -> str:
    answer = ws.post("/v1/decisions", DECISIONS_BODY)
    return fence("bash", _curl_json("/v1/decisions", DECISIONS_BODY)) + "\n" + fence(
        "json", dump_json(answer))


def _post_run(ws: Workspace) -> str:
    body = (ws.path / "examples" / "small.jsonl").read_bytes()
    answer = ws.post("/v1/runs?run=small&policy=agree&max_draws=4", body,
                     content_type="application/x-ndjson")
    command = ("curl -H \"$AUTH\" -H 'content-type: application/x-ndjson' "
               "--data-binary @examples/small.jsonl \\\n"
               '     "$API/v1/runs?run=small&policy=agree&max_draws=4"')
    return fence("bash", command) + "\n" + fence("json", dump_json(answer))


#: In the order they run: ``run`` makes the run the next five read.
SAMPLES = (
    Sample("run", "README.md", _run),
    Sample("report", "docs/commands.md", _report),
    Sample("report-html", "README.md", _report_html),
    Sample("report-against", "docs/commands.md", _report_against),
    Sample("submit-dry-run", "README.md", _submit_dry_run),
    Sample("status", "docs/commands.md", _status),
    Sample("runs", "docs/commands.md", _runs),
    Sample("decide", "docs/commands.md", _decide),
    Sample("check-upstream", "docs/commands.md", _check_upstream),
    Sample("systemone", "docs/api.md", _systemone),
    Sample("decisions", "docs/api.md", _decisions),
    Sample("post-run", "docs/api.md", _post_run),
)


def generate(names: set[str] | None = None, path: Path | None = None) -> dict[str, str]:
    """Each sample's block, made by running its commands (``run`` always runs first)."""
    wanted = [s for s in SAMPLES if names is None or s.name in names or s.name == "run"]
    with workspace(path) as ws:
        return {s.name: s.make(ws) for s in wanted}


# -- reading and writing the pages ----------------------------------------------------------

def read_blocks() -> dict[str, list[tuple[Path, str]]]:
    """Every sample block of the pages: name -> [(page, block text)]."""
    found: dict[str, list[tuple[Path, str]]] = {}
    for page in PAGES:
        for match in MARKER.finditer(page.read_text(encoding="utf-8")):
            found.setdefault(match["name"], []).append((page, match["body"]))
    return found


def write_blocks(blocks: dict[str, str]) -> list[str]:
    """Replace each named block on its page; the names of the blocks that changed."""
    changed = []
    for sample in SAMPLES:
        if sample.name not in blocks:
            continue
        page = ROOT / sample.page
        text = page.read_text(encoding="utf-8")
        new = _replace(text, sample.name, blocks[sample.name])
        if new is None:
            raise SystemExit(f"{sample.page}: no <!-- sample: {sample.name} --> block")
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(sample.name)
    return changed


def _replace(text: str, name: str, block: str) -> str | None:
    pattern = re.compile(rf"(<!-- sample: {re.escape(name)} -->\n).*?(<!-- /sample -->)",
                         re.DOTALL)
    if not pattern.search(text):
        return None
    return pattern.sub(lambda m: m[1] + block + m[2], text, count=1)


# -- fields: what a block shows, numbers aside -----------------------------------------------

_NUMERIC = re.compile(r"\d")
_BAR = re.compile(r"^[━╸╺─]+$")


def fields(block: str) -> list[str]:
    """What must not change unless the docs are regenerated: per fenced section, the column
    headers and row labels of each table, the key paths of a JSON body, and the words (tokens
    with no digit) of the other lines."""
    out: list[str] = []
    for language, text in re.findall(r"```(\w*)\n(.*?)```", block, re.DOTALL):
        if language == "json":
            out.extend(f"key {p}" for p in _key_paths(json.loads(text)))
        elif language == "text":
            out.extend(_text_fields(text))
        else:
            out.extend(f"line {_words(x)}" for x in text.splitlines() if _words(x))
    return out


def _key_paths(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in [f"{path}.{k}", *_key_paths(v, f"{path}.{k}")]]
    if isinstance(value, list):
        return sorted({p for v in value for p in _key_paths(v, path + "[]")})
    return []


def _words(line: str) -> str:
    return " ".join(t for t in line.split() if not _NUMERIC.search(t) and not _BAR.match(t))


def _text_fields(text: str) -> list[str]:
    """Tables by their fields; the lines between tables as one run of words each (so a line
    that wraps elsewhere because a number grew is still the same text)."""
    out: list[str] = []
    lines = text.splitlines()
    words: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].lstrip().startswith(_TOP):
            words.extend(_words(lines[i]).split())
            i += 1
            continue
        if words:
            out.append(f"text {' '.join(words)}")
            words = []
        end = next(j for j in range(i, len(lines)) if lines[j].lstrip().startswith(_BOTTOM))
        out.extend(_table_fields(lines[i + 1:end]))
        i = end + 1
    if words:
        out.append(f"text {' '.join(words)}")
    return out


def _table_fields(table: list[str]) -> list[str]:
    head_end = next((k for k, x in enumerate(table) if x.lstrip().startswith(_HEAD_END)), None)
    head, body = (table[:head_end], table[head_end + 1:]) if head_end is not None else ([], table)
    columns: list[list[str]] = []
    for line in head:
        for k, cell in enumerate(_cells(line)):
            if k == len(columns):
                columns.append([])
            if cell:
                columns[k].append(cell)
    out = [f"column {' '.join(c)}" for c in columns]
    for row in _logical_rows(body):
        first = [c for c in (_cells(x)[:1] for x in row) if c and c[0]]
        out.append(f"row {' '.join(c[0] for c in first)}")
    return out


# -- command line ---------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="samples to regenerate (default: all)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a block's fields differ from the output")
    args = parser.parse_args(argv)
    unknown = set(args.names) - {s.name for s in SAMPLES}
    if unknown:
        parser.error(f"no such sample: {', '.join(sorted(unknown))}")
    blocks = generate(set(args.names) if args.names else None)
    if not args.check:
        changed = write_blocks(blocks)
        sys.stdout.write(f"rewrote: {', '.join(changed) or 'nothing'}\n")
        return 0
    on_pages = read_blocks()
    stale = [name for name, block in blocks.items()
             if [fields(b) for _, b in on_pages.get(name, [])] != [fields(block)]]
    sys.stdout.write(f"stale: {', '.join(stale)}\n" if stale else "every sample is current\n")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
