"""Hidden option aliases (``--db`` for ``--database-url``) and the tidy help."""

from __future__ import annotations

import pytest

from app.cli._typer import resolve_aliases

KNOWN = {"--database-url", "--wait", "--json"}


@pytest.mark.parametrize(("args", "expected"), [
    (["--db", "x.db"], ["--database-url", "x.db"]),
    (["--db=x.db", "--json"], ["--database-url=x.db", "--json"]),
    (["--database", "u"], ["--database-url", "u"]),
    (["--timeout", "5"], ["--wait", "5"]),
    (["--", "--db"], ["--", "--db"]),  # after "--" nothing is an option
    (["run", "--dbx"], ["run", "--dbx"]),
])
def test_aliases_become_the_documented_name(args: list[str], expected: list[str]) -> None:
    assert resolve_aliases(args, KNOWN) == expected


def test_an_alias_is_left_alone_where_the_command_has_no_such_option() -> None:
    assert resolve_aliases(["--db", "x"], {"--json"}) == ["--db", "x"]
    assert resolve_aliases(["--db", "x"], {"--db", "--database-url"}) == ["--db", "x"]
