"""The limits one image fetch is held to: a total deadline (a server dripping a byte at a
time is cut at it), regular files only (a FIFO is refused, not waited on), pixels read from
the header before decoding (a decompression bomb costs no memory), and how many images and
bytes one decision may carry."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from app.errors import ImageError, ImageUnreachable
from app.images import ImagePolicy, fetch_image, fetch_image_async
from app.images.limits import ByteBudget, over_total, too_many_images
from tests.fixtures.images import ImageServer, data_url, png
from tests.fixtures.raw_server import RawServer, dripping

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def drip() -> Iterator[RawServer]:
    server = RawServer(dripping(100, 0.4))
    yield server
    server.stop()


async def test_a_dripping_server_is_cut_at_the_deadline_on_the_api_path(
        drip: RawServer) -> None:
    t0 = time.monotonic()
    with pytest.raises(ImageUnreachable, match=r"not fetched within 1.5 s"):
        await fetch_image_async(f"{drip.url}/a.png", policy=ImagePolicy(timeout_s=1.5))
    assert 1.4 < time.monotonic() - t0 < 2.5


def test_a_dripping_server_is_cut_at_the_deadline_at_submit(drip: RawServer) -> None:
    t0 = time.monotonic()
    with pytest.raises(ImageUnreachable, match=r"not fetched within 1.5 s"):
        fetch_image(f"{drip.url}/a.png", policy=ImagePolicy(timeout_s=1.5))
    assert 1.4 < time.monotonic() - t0 < 2.5


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    policy = ImagePolicy(allowed_dirs=(tmp_path.resolve(),))
    outcome: list[BaseException] = []

    def fetch() -> None:
        try:
            fetch_image(fifo.as_uri(), policy=policy)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():  # unblock the reader so the thread ends, then fail
        with open(fifo, "wb"):
            pass
        pytest.fail("reading a FIFO blocked")
    assert isinstance(outcome[0], ImageError)
    assert "not a regular file" in outcome[0].message


def test_an_image_over_the_pixel_limit_is_refused_from_its_header() -> None:
    body = png(3, (50, 40))
    with pytest.raises(ImageError, match=r"50 x 40 pixels, over the limit of 1,999; .*"
                                         r"DREADS_IMAGE_MAX_PIXELS"):
        fetch_image(data_url(body), policy=ImagePolicy(max_pixels=1999))
    assert fetch_image(data_url(body), policy=ImagePolicy(max_pixels=2000)).width == 50


def test_a_decompression_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """9400 x 9400 pixels in a few hundred KB (under pillow's own limit): 250 MiB decoded."""
    bomb = tmp_path / "bomb.png"
    out = io.BytesIO()
    Image.new("RGB", (9400, 9400), (20, 120, 200)).save(out, "PNG")
    bomb.write_bytes(out.getvalue())
    code = (
        "import resource, sys\n"
        "from app.errors import ImageError\n"
        "from app.images import ImagePolicy, fetch_image, parse_image_dirs\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"policy = ImagePolicy(allowed_dirs=parse_image_dirs({str(tmp_path)!r}))\n"
        "try:\n"
        f"    fetch_image({bomb.as_uri()!r}, policy=policy)\n"
        "    print('decoded')\n"
        "except ImageError as exc:\n"
        "    print(exc.message)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, timeout=60)
    said, grown_mib = done.stdout.strip().splitlines()
    assert "9400 x 9400 pixels, over the limit" in said
    assert int(grown_mib) < 50  # decoding it would take 250 MiB


def test_too_many_images_and_too_many_bytes_are_named() -> None:
    policy = ImagePolicy(max_count=2, max_total_bytes=1000)
    assert too_many_images(2, policy) is None
    assert too_many_images(3, policy) == ("3 images, over the limit of 2 per decision; send "
                                          "fewer or raise DREADS_IMAGE_MAX_COUNT")
    assert over_total(1000, policy) is None
    assert "DREADS_IMAGE_MAX_TOTAL_BYTES" in (over_total(1001, policy) or "")


async def test_a_decisions_images_share_one_byte_budget(image_server: ImageServer,
                                                       tmp_path: Path) -> None:
    body = png(4)
    (tmp_path / "a.png").write_bytes(body)
    policy = ImagePolicy(allowed_dirs=(tmp_path.resolve(),), max_total_bytes=2 * len(body) - 1)
    budget = ByteBudget(policy)
    await fetch_image_async(image_server.add("/a.png", body), policy=policy, budget=budget)
    assert budget.used == len(body)
    with pytest.raises(ImageError, match=r"over the limit of .* per decision; .*"
                                         r"DREADS_IMAGE_MAX_TOTAL_BYTES"):
        await fetch_image_async((tmp_path / "a.png").as_uri(), policy=policy, budget=budget)
    with pytest.raises(ImageError, match=r"DREADS_IMAGE_MAX_TOTAL_BYTES"):
        await fetch_image_async(image_server.add("/b.png", body), policy=policy, budget=budget)
