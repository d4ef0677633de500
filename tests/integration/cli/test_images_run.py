"""``dreads run`` with images, on SQLite with the simulator: the shipped image example is
answered; a bad image is a clear per-decision rejection at submit while the other lines run;
``--image-dirs`` lets ``file://`` images in; a completions run rejects image lines."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import orjson

from tests.fixtures.images import data_url, png
from tests.fixtures.runs_cli import CliResult, sqlite_rows, write_jobs

Dreads = Callable[..., CliResult]
ROOT = Path(__file__).resolve().parents[3]
DREADS = str(Path(sys.executable).parent / "dreads")
BY_STATUS = "SELECT key, status FROM decisions ORDER BY key"
QUESTION = {"red": {"type": "noul", "instructions": "Is the picture mostly red?"}}


def _line(did: str, images: list[str]) -> str:
    return orjson.dumps({"id": did, "state": f"Photo {did}.", "images": images,
                         "questions": QUESTION}).decode()


def test_the_image_example_runs_with_the_simulator(dreads: Dreads, tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    result = dreads("run", str(ROOT / "examples" / "images.jsonl"), "--upstream", "sim",
                    "--db", str(db))
    assert result.code == 0, result.stderr
    assert "done 4" in result.stdout
    assert sqlite_rows(db, "SELECT DISTINCT status FROM decisions") == [("done",)]
    out = tmp_path / "answers.jsonl"
    assert dreads("export", "images", "--db", str(db), "-o", str(out)).code == 0
    records = {r["id"]: r for r in map(orjson.loads, out.read_text().splitlines())}
    assert [len(records[k]["images"]) for k in ("bar", "line", "line-no-text", "pair")] == [
        1, 1, 1, 2]
    assert all(r["answers"] and all(a["answered"] for a in r["answers"].values())
               for r in records.values())


def test_a_bad_image_rejects_its_line_and_the_others_run(dreads: Dreads,
                                                         tmp_path: Path) -> None:
    allowed, other = tmp_path / "photos", tmp_path / "elsewhere"
    allowed.mkdir()
    other.mkdir()
    (allowed / "ok.png").write_bytes(png(1))
    (other / "no.png").write_bytes(png(2))
    job = write_jobs(tmp_path / "j.jsonl", [
        _line("file-ok", [(allowed / "ok.png").as_uri()]),
        _line("data-ok", [data_url(png(3))]),
        _line("outside", [(other / "no.png").as_uri()]),
        _line("not-image", [data_url(b"plain text", "image/png")]),
    ])
    db = tmp_path / "d.db"
    result = dreads("run", str(job), "--upstream", "sim", "--db", str(db),
                    "--image-dirs", str(allowed))
    assert result.code == 0, result.stderr
    assert "outside the directories images may be read from" in result.stderr
    assert "not an image pillow can read" in result.stderr
    assert sqlite_rows(db, BY_STATUS) == [("data-ok", "done"), ("file-ok", "done"),
                                          ("not-image", "rejected"), ("outside", "rejected")]


def test_a_completions_run_rejects_image_lines(dreads: Dreads, tmp_path: Path) -> None:
    job = write_jobs(tmp_path / "j.jsonl", [
        _line("img", [data_url(png(1))]),
        orjson.dumps({"id": "text", "state": "Words.", "questions": QUESTION}).decode()])
    db = tmp_path / "d.db"
    result = dreads("run", str(job), "--upstream", "sim", "--db", str(db), "--endpoint",
                    "completions")
    assert result.code == 0, result.stderr
    assert "completions by token ids cannot carry an image" in result.stderr
    assert "--endpoint chat" in result.stderr
    assert sqlite_rows(db, BY_STATUS) == [("img", "rejected"), ("text", "done")]


def test_a_dry_run_fetches_the_images_and_counts_their_tokens(dreads: Dreads,
                                                              tmp_path: Path) -> None:
    text = write_jobs(tmp_path / "text.jsonl", [orjson.dumps(
        {"id": "a", "state": "Photo a.", "questions": QUESTION}).decode()])
    job = write_jobs(tmp_path / "j.jsonl", [
        _line("a", [data_url(png(1))]), _line("bad", [data_url(b"no picture", "image/png")])])
    plain = dreads("run", str(text), "--upstream", "sim", "--dry-run", "--json")
    with_image = dreads("run", str(job), "--upstream", "sim", "--dry-run", "--json")
    assert with_image.code == 0, with_image.stderr
    doc = with_image.json()
    assert doc["valid"] == 2
    assert [(r["id"], "not an image pillow can read" in r["reason"])
            for r in doc["rejected"]] == [("bad", True)]
    assert not (tmp_path / "dreads.db").exists()
    # the image's placeholder tokens are counted: the read's prompt is longer than its text's
    assert doc["prompt_tokens_per_read"]["min"] > plain.json()["prompt_tokens_per_read"]["max"]
