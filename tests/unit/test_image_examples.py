"""The shipped image example: valid job lines whose data URLs are the PNGs in examples/images/,
the pictures the generator draws, and a key line for every (state, question) with a state."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

from PIL import Image, ImageChops

from app.engine import parse_decision

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_lines_parse_and_carry_the_shipped_pngs() -> None:
    shipped = {(EXAMPLES / "images" / name).read_bytes() for name in ("bar.png", "line.png")}
    decisions = [parse_decision(line, line_no=n)
                 for n, line in enumerate(_lines(EXAMPLES / "images.jsonl"), 1)]
    assert [len(d.images) for d in decisions] == [1, 1, 1, 2]
    carried = {base64.b64decode(ref.partition(",")[2]) for d in decisions for ref in d.images}
    assert carried == shipped
    assert any(d.state is None for d in decisions)


def test_the_key_covers_every_question_of_a_state() -> None:
    key = {(k["state"], k["question"]) for k in _lines(EXAMPLES / "images.key.jsonl")}
    for line in _lines(EXAMPLES / "images.jsonl"):
        if line["state"] is None:
            continue
        for spec in line["questions"].values():  # type: ignore[attr-defined]
            assert (line["state"], spec["instructions"]) in key


def test_the_generator_draws_the_shipped_pictures(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(EXAMPLES / "make_images.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True, timeout=60)
    for name in ("bar.png", "line.png"):
        with Image.open(EXAMPLES / "images" / name) as shipped, \
                Image.open(io.BytesIO((tmp_path / "images" / name).read_bytes())) as drawn:
            assert ImageChops.difference(shipped.convert("RGB"),
                                         drawn.convert("RGB")).getbbox() is None
