"""docs/internals.md tells the truth: its engine example runs as written (against the
in-process simulator, over real HTTP), it links nothing outside the repository, and every
module of app/ and workers/ is on its map."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "internals.md"
#: a package's __init__.py is its directory's line
_NAMED_IN_PROSE = {"__init__.py"}


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_engine_example_runs_as_written(tmp_path: Path) -> None:
    (block,) = _python_blocks(DOC.read_text(encoding="utf-8"))
    script = tmp_path / "example.py"
    script.write_text(block, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    question, label, draws = done.stdout.split()
    assert question == "conflict" and label in {"yes", "no"} and int(draws) >= 1


def test_no_link_leaves_the_repository() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "../" not in text
    assert not re.search(r"\]\((?!#)[^)]*\)", text), "markdown links: only anchors"
    local = r"[a-z+]+://[^\s`]*127\.0\.0\.1[^\s`]*|sqlite:///[^\s`]*"
    assert "://" not in re.sub(local, "", text), "only local service URLs"


def test_every_module_is_on_the_map() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = []
    for path in sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "workers").glob("*.py")]):
        if path.name in _NAMED_IN_PROSE:
            continue
        if path.name not in text:
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"not on the map in docs/internals.md: {missing}"
