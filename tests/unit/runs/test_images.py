"""Decisions with images through submit and ``run_chunk`` on the real store (SQLite) and the
simulator in this process (``tests.fixtures.memory_upstream``), the images served by a local
HTTP server that counts each fetch.

- submit fetches each image once, stores its record (ref, sha256, size), and rejects only the
  decisions whose image cannot be used; a run that reads by completions rejects image lines;
- a worker fetches a decision's images once per attempt (never once per draw); an image whose
  bytes changed after submit is ``image_changed`` (permanent, no read sent); one whose URL
  stops answering is ``image_unreachable`` (retried, then failed at the attempt cap).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from PIL import Image
from sqlalchemy import select

from app.engine import Endpoint, PolicyName, ReadSettings
from app.images import ImageCache, ImagePolicy
from app.runs.chunk import Answerers, ChunkPolicy, ChunkResult, Delivery, run_chunk
from app.runs.submit import SubmitReport, SubmitRequest, submit_job
from app.store.db import session_scope
from app.store.models import Attempt, Decision, DecisionPayload
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.images import ImageServer, data_url, png
from tests.fixtures.memory_upstream import InMemoryUpstream, memory_sim
from tests.fixtures.run_store import RunStore
from tests.fixtures.services import free_port

QUESTION = {"kind": {"type": "choice", "instructions": "Which kind of chart is this?",
                     "criteria": {"bar": None, "line": None, "pie": None}}}


@pytest.fixture
def stack(make_database: Callable[..., str]) -> Iterator[RunStore]:
    with RunStore.open(make_database("sqlite")) as opened:
        yield opened


def _line(did: str, images: list[str], **extra: Any) -> dict[str, Any]:
    return {"id": did, "state": f"Figure {did}.", "questions": QUESTION, "images": images,
            **extra}


def _submit(stack: RunStore, tmp_path: Path, lines: list[dict[str, Any]], *,
            settings: ReadSettings | None = None, policy: ImagePolicy | None = None,
            name: str = "img") -> SubmitReport:
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    request = SubmitRequest(path=path, run_name=name, settings=settings or ReadSettings(),
                            upstream=stack.upstream, images=policy or ImagePolicy())
    report = submit_job(request, stack.factory, load_tokenizer("standin"))
    assert report.run is not None
    stack.run_id = report.run.id
    return report


def _rows(stack: RunStore) -> dict[str, tuple[int, str, str | None, dict[str, Any]]]:
    """key -> (id, status, last error kind, payload)."""
    with session_scope(stack.factory) as s:
        rows = s.execute(select(Decision.id, Decision.key, Decision.status,
                                Decision.last_error_kind, DecisionPayload.payload)
                         .join(DecisionPayload, DecisionPayload.decision_id == Decision.id)
                         .where(Decision.run_id == stack.run_id)).all()
    return {key: (rid, status, kind, payload) for rid, key, status, kind, payload in rows}


def _outcomes(stack: RunStore) -> list[str]:
    with session_scope(stack.factory) as s:
        return list(s.scalars(select(Attempt.outcome).where(Attempt.run_id == stack.run_id)
                              .order_by(Attempt.id)))


async def _chunk(stack: RunStore, ids: list[int], cache: ImageCache, *,
                 max_attempts: int = 5) -> ChunkResult:
    upstream = InMemoryUpstream(memory_sim(), retries=0)
    try:
        return await run_chunk(
            stack.factory, stack.run_id, ids,
            answerers=Answerers(upstream, load_tokenizer("standin"), images=cache),
            policy=ChunkPolicy(lease_s=30, max_in_flight=16, max_attempts=max_attempts),
            delivery=Delivery("test"))
    finally:
        await upstream.aclose()


def _noise_png() -> bytes:
    out = io.BytesIO()
    Image.effect_noise((256, 256), 64).save(out, "PNG")
    return out.getvalue()


def test_submit_checks_each_image_once_and_rejects_only_the_bad_lines(
        stack: RunStore, tmp_path: Path, image_server: ImageServer) -> None:
    allowed, elsewhere = tmp_path / "images", tmp_path / "private"
    allowed.mkdir()
    elsewhere.mkdir()
    (allowed / "pie.png").write_bytes(png(3))
    (elsewhere / "secret.png").write_bytes(png(4))
    shared = image_server.add("/bar.png", png(1))
    big = image_server.add("/big.png", _noise_png())
    page = image_server.add("/page.html", b"<html>not a picture</html>", "text/html")
    lines = [
        _line("http", [shared]), _line("http-again", [shared]),
        _line("data", [data_url(png(2))]), _line("file", [(allowed / "pie.png").as_uri()]),
        _line("two", [shared, data_url(png(2))], state=None),
        {"id": "text", "state": "No picture here.", "questions": QUESTION},
        _line("outside", [(elsewhere / "secret.png").as_uri()]),
        _line("missing", [image_server.url + "/gone.png"]),
        _line("not-image", [page]), _line("garbage", [data_url(b"GIF89a broken")]),
        _line("too-big", [big]),
        _line("unreachable", [f"http://127.0.0.1:{free_port()}/x.png"]),
    ]
    policy = ImagePolicy(allowed_dirs=(allowed.resolve(),), max_bytes=20_000, timeout_s=5)
    report = _submit(stack, tmp_path, lines, policy=policy)

    reasons = {p.key: p.reason for p in report.rejected}
    assert set(reasons) == {"outside", "missing", "not-image", "garbage", "too-big",
                            "unreachable"}
    assert "outside the directories images may be read from" in reasons["outside"]
    assert "HTTP 404" in reasons["missing"]
    assert "declared as text/html" in reasons["not-image"]
    assert "not an image pillow can read" in reasons["garbage"]
    assert "over the limit of 20,000 bytes" in reasons["too-big"]
    assert "unreachable" in reasons["unreachable"]
    assert all(r.startswith("image '") for r in reasons.values())
    assert image_server.hits["/bar.png"] == 1  # three lines share it: fetched once

    rows = _rows(stack)
    assert {k: v[1] for k, v in rows.items()} == {
        **{k: "pending" for k in ("http", "http-again", "data", "file", "two", "text")},
        **{k: "rejected" for k in reasons}}
    record = rows["two"][3]["images"][0]
    assert record["ref"] == shared and len(record["sha256"]) == 64
    assert (record["media_type"], record["width"], record["height"], record["bytes"]) == (
        "image/png", 24, 16, len(png(1)))
    assert rows["two"][3]["state"] is None
    assert "images" not in rows["text"][3]


def test_a_completions_run_rejects_its_image_lines_and_keeps_the_rest(
        stack: RunStore, tmp_path: Path) -> None:
    lines = [_line("img", [data_url(png(1))]),
             {"id": "text", "state": "Words only.", "questions": QUESTION}]
    report = _submit(stack, tmp_path, lines,
                     settings=ReadSettings(endpoint=Endpoint.COMPLETIONS))
    assert [(p.key, p.reason) for p in report.rejected] == [
        ("img", "its images need the chat endpoint: completions by token ids cannot carry an "
                "image; submit the file to a run with --endpoint chat")]
    assert report.readable == 1


async def test_an_image_whose_bytes_changed_is_never_answered(
        stack: RunStore, tmp_path: Path, image_server: ImageServer) -> None:
    url = image_server.add("/a.png", png(1))
    _submit(stack, tmp_path, [_line("a", [url])])
    image_server.add("/a.png", png(9))  # another picture under the same URL
    rid = _rows(stack)["a"][0]
    result = await _chunk(stack, [rid], ImageCache(ImagePolicy()))
    assert (result.rejected, result.n_reads) == (1, 0)
    assert _rows(stack)["a"][1:3] == ("rejected", "image_changed")
    assert _outcomes(stack) == ["image_changed"]


async def test_an_image_that_stops_answering_is_retried_then_failed(
        stack: RunStore, tmp_path: Path, image_server: ImageServer) -> None:
    url = image_server.add("/a.png", png(1))
    _submit(stack, tmp_path, [_line("a", [url])])
    image_server.status = 503
    rid = _rows(stack)["a"][0]
    first = await _chunk(stack, [rid], ImageCache(ImagePolicy()), max_attempts=2)
    assert first.failed == {"image_unreachable": 1} and first.n_reads == 0
    assert _rows(stack)["a"][1:3] == ("pending", "image_unreachable")
    await _chunk(stack, [rid], ImageCache(ImagePolicy()), max_attempts=2)
    assert _rows(stack)["a"][1:3] == ("failed", "image_unreachable")
    assert _outcomes(stack) == ["image_unreachable", "image_unreachable"]
    assert image_server.hits["/a.png"] == 3  # submit, then once per attempt


async def test_each_image_is_fetched_once_per_attempt_not_once_per_draw(
        stack: RunStore, tmp_path: Path, image_server: ImageServer) -> None:
    urls = [image_server.add(f"/{i}.png", png(i)) for i in range(6)]
    settings = ReadSettings(policy=PolicyName.FIXED, fixed_draws=4)
    _submit(stack, tmp_path, [_line(f"d{i}", [u]) for i, u in enumerate(urls)],
            settings=settings)
    submitted = image_server.total()
    ids = [row[0] for row in _rows(stack).values()]
    result = await _chunk(stack, ids, ImageCache(ImagePolicy()))
    assert (result.done, result.n_reads) == (6, 24)  # 4 draws each
    assert image_server.total() - submitted == 6  # one fetch per attempt, none per draw
