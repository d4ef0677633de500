"""examples/tickets.jsonl (the comparison's example) is what examples/make_tickets.py writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_tickets_are_what_the_generator_writes(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(EXAMPLES / "make_tickets.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True, timeout=60)
    for name in ("tickets.jsonl", "tickets.key.jsonl"):
        assert (tmp_path / name).read_bytes() == (EXAMPLES / name).read_bytes(), (
            f"examples/{name} differs: run `python examples/make_tickets.py` and commit it")
