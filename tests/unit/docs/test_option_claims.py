"""What docs/commands.md says about options shared by several commands agrees with the CLI.

The section "Options every command shares" makes claims such as "`run`, `submit` and `resume`
take `--wait SECONDS`": each clause (between ``;`` and sentence ends) that names commands in
code spans before the word "take(s)" and options after it is checked against the CLI's Click
tree, both ways for ``--wait`` (every command that has it is named as taking it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

import app.cli  # noqa: F401  (the command modules register on import)
from app.cli import _app

ROOT = Path(__file__).resolve().parents[3]
COMMANDS_MD = ROOT / "docs" / "commands.md"
SECTION = "## Options every command shares"
#: Options whose every command must be named in a claim (the docs list them all).
LISTED_IN_FULL = ("--wait",)
TAKE = re.compile(r"\btakes?\b")


def section_text(page: Path = COMMANDS_MD) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index(SECTION) + len(SECTION)
    end = text.index("\n## ", start)
    return " ".join(text[start:end].split())


def clauses(text: str) -> list[str]:
    """Clauses of the section: split at ``;``, sentence ends and bullets."""
    return [c for c in re.split(r";|\.\s|\s-\s\*\*", text) if c.strip()]


def claims(text: str, commands: set[str]) -> list[tuple[str, set[str], set[str]]]:
    """(clause, commands named before "take", options named after it) of each clause that
    names both."""
    found = []
    for clause in clauses(text):
        match = TAKE.search(clause)
        if match is None:
            continue
        before, after = clause[:match.start()], clause[match.end():]
        named = {span for span in re.findall(r"`([^`]+)`", before) if span in commands}
        options = {word for span in re.findall(r"`([^`]+)`", after)
                   for word in re.split(r"[\s|/]+", span) if word.startswith("--")}
        if named and options:
            found.append((clause.strip(), named, options))
    return found


@pytest.fixture(scope="module")
def cli() -> dict[str, set[str]]:
    """Each command of ``dreads`` (``db upgrade`` for a subcommand) -> its option names."""
    root = typer.main.get_command(_app.app)
    out: dict[str, set[str]] = {}

    def walk(group: Any, prefix: str) -> None:
        for name, command in group.commands.items():
            if isinstance(getattr(command, "commands", None), dict):
                walk(command, f"{prefix}{name} ")
                continue
            out[prefix + name] = {opt for p in command.params
                                  for opt in (*p.opts, *p.secondary_opts)}

    walk(root, "")
    return out


def test_each_claim_about_shared_options_holds(cli: dict[str, set[str]]) -> None:
    found = claims(section_text(), set(cli))
    assert len(found) >= 4, f"only {len(found)} claims found: is the parser broken? {found}"
    wrong = [f"`{command}` has no {option} ({clause!r})"
             for clause, named, options in found for command in sorted(named)
             for option in sorted(options) if option not in cli[command]]
    assert not wrong, "docs/commands.md claims options the CLI lacks:\n" + "\n".join(wrong)


@pytest.mark.parametrize("option", LISTED_IN_FULL)
def test_every_command_with_the_option_is_named(cli: dict[str, set[str]], option: str) -> None:
    named = {command for _, commands, options in claims(section_text(), set(cli))
             if option in options for command in commands}
    having = {command for command, options in cli.items() if option in options}
    assert named, f"no claim about {option}"
    assert having == named, (f"commands with {option} the docs do not name: "
                             f"{sorted(having - named)}; named without it: "
                             f"{sorted(named - having)}")


def test_the_parser_reads_a_claim_and_catches_a_false_one(cli: dict[str, set[str]]) -> None:
    text = ("- **Waiting.** `run`, `submit` and `status` take `--wait SECONDS`, default 0; "
            "`check-upstream` takes `--engine vllm|transformers --device`.")
    found = claims(text, set(cli))
    assert [(named, options) for _, named, options in found] == [
        ({"run", "submit", "status"}, {"--wait"}),
        ({"check-upstream"}, {"--engine", "--device"})]
    assert "--wait" not in cli["status"], "the false claim above must stay false"
