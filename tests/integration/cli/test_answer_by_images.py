"""``dreads run --answer-by systemone`` with image decisions: each decision's images go in the
request's ``images`` (an http(s) URL as given, a ``file://`` image as the data URL of its
bytes), the simulator's ``/v1/systemone`` reads them as vLLM 0.33's reader does, and its answers
equal dreads' own first draw of the same decisions."""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
from PIL import Image

from tests.fixtures.runs_cli import CliResult, sqlite_rows, write_jobs
from tests.fixtures.sim import MakeSim

Dreads = Callable[..., CliResult]


def _png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(out, format="PNG")
    return out.getvalue()


HOSTED = {"/parcel.png": _png((120, 60, 0))}


class _Host(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = HOSTED.get(self.path)
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", "image/png")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def image_host() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Host)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _line(key: str, images: list[str], state: str | None) -> str:
    return orjson.dumps({"id": key, "state": state, "images": images, "questions": {
        "damage": {"type": "noul", "instructions": "Is the parcel damaged?"},
        "kind": {"type": "choice", "instructions": "What is shown?",
                 "criteria": {"box": None, "envelope": None}}}}).decode()


def _answers(db: Path, run: str) -> dict[tuple[str, str], Any]:
    rows = sqlite_rows(db, "SELECT d.key, a.question_id, a.probs FROM answers a JOIN decisions d "
                       "ON d.id = a.decision_id JOIN runs r ON r.id = d.run_id WHERE r.name = "
                       f"'{run}'")
    return {(k, q): orjson.loads(p) if isinstance(p, str) else p for k, q, p in rows}


def test_a_systemone_run_sends_the_images_and_equals_dreads_first_draw(
        dreads: Dreads, make_sim: MakeSim, image_host: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "local.png").write_bytes(_png((0, 90, 30)))
    monkeypatch.setenv("DREADS_IMAGE_DIRS", str(tmp_path))
    inline = "data:image/png;base64," + base64.b64encode(_png((5, 5, 200))).decode()
    path = write_jobs(tmp_path / "images.jsonl", [
        _line("url", [f"{image_host}/parcel.png"], "Photo at delivery."),
        _line("file", [(tmp_path / "local.png").as_uri()], None),
        _line("two", [inline, f"{image_host}/parcel.png"], "Two photos."),
        _line("text", [], "No photo, a note: the box is crushed.")])
    sim, db = make_sim(), tmp_path / "runs.db"
    by_endpoint = dreads("run", str(path), "--db", str(db), "--run", "s1", "--answer-by",
                         "systemone", "--answer-url", sim.url)
    assert by_endpoint.code == 0, by_endpoint.stderr
    stats = sim.stats()
    assert stats["decisions"] == 4 and stats["decisions_answered"] == 4
    assert stats["image_fetches"] >= 2  # the endpoint fetched the http(s) images itself
    by_reads = dreads("run", str(path), "--db", str(db), "--run", "r1", "--upstream", sim.url,
                      "--draws", "1")
    assert by_reads.code == 0, by_reads.stderr
    theirs, mine = _answers(db, "s1"), _answers(db, "r1")
    assert theirs.keys() == mine.keys() and len(theirs) == 8
    for key, probs in theirs.items():
        assert probs == pytest.approx(mine[key], abs=1e-9), key
    # the images were read: another picture, another answer
    assert theirs[("url", "damage")] != theirs[("two", "damage")]
