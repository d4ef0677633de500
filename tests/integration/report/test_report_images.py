"""Image decisions in ``dreads report`` and ``dreads export``: every listed question shows its
images' references; the HTML page's lists of misses show a thumbnail made now from the stored
reference (embedded, the page fetches nothing), or the reference as text with the reason when
the image cannot be fetched or its bytes changed since submit; the export carries each image's
record."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import app
from app.images import ImagePolicy, fetch_image, stored_image
from app.report.thumbnails import THUMBNAIL_PX
from tests.fixtures.images import ImageServer, data_url, png
from tests.fixtures.report_db import RunBuilder

runner = CliRunner()


def _record(ref: str) -> dict[str, Any]:
    return stored_image(fetch_image(ref, policy=ImagePolicy())).to_json()


def _big_png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (400, 300), (10, 200, 30)).save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def image_run(report_db: tuple[str, sessionmaker[Session]],
              image_server: ImageServer) -> tuple[str, dict[str, str]]:
    url, factory = report_db
    refs = {"http": image_server.add("/big.png", _big_png()), "data": data_url(png(2)),
            "gone": image_server.add("/gone.png", png(3)),
            "changed": image_server.add("/changed.png", png(4))}
    records = {name: _record(ref) for name, ref in refs.items()}
    del image_server.files["/gone.png"]
    image_server.add("/changed.png", png(5))
    with factory() as session:
        build = RunBuilder(session, "pictures")
        build.noul("missed-http", 0.05, "yes", images=[records["http"]])
        build.noul("missed-data", 0.10, "yes", images=[records["data"]])
        build.noul("missed-gone", 0.15, "yes", images=[records["gone"]])
        build.noul("false-changed", 0.95, "no", images=[records["changed"]])
        build.noul("missed-text", 0.20, "yes")
        build.noul("right", 0.90, "yes", images=[records["http"]])
        session.commit()
    return url, refs


def _invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_report_lists_each_miss_with_its_images(image_run: tuple[str, dict[str, str]],
                                                    tmp_path: Path) -> None:
    url, refs = image_run
    page = tmp_path / "report.html"
    doc = json.loads(_invoke("report", "pictures", "--database-url", url, "--json",
                             "--html", str(page)))
    items = {i["decision"]: i for i in doc["review"]["missed_positives"]["items"]}
    assert items["missed-http"]["images"] == [refs["http"]]
    assert items["missed-data"]["images"] == [  # a data URL by its head and length
        f"data:image/png;base64,... ({len(refs['data'])} characters)"]
    assert "images" not in items["missed-text"]
    assert doc["review"]["false_positives"]["items"][0]["images"] == [refs["changed"]]

    html = page.read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(
        r"<tr><td>([\w-]+)</td>.*?</tr>", html)}
    thumbs = re.findall(r'<img class="thumb" src="data:image/png;base64,([^"]+)"',
                        rows["missed-http"])
    assert len(thumbs) == 1
    with Image.open(io.BytesIO(base64.b64decode(thumbs[0]))) as shown:
        assert max(shown.size) == THUMBNAIL_PX  # 400x300 shrunk, not the original bytes
    assert '<img class="thumb"' in rows["missed-data"]
    assert "not shown: image" in rows["missed-gone"] and "HTTP 404" in rows["missed-gone"]
    assert refs["gone"] in rows["missed-gone"]
    assert "its bytes changed since submit" in rows["false-changed"]
    assert 'class="images"' not in rows["missed-text"] or "<img" not in rows["missed-text"]


def test_the_terminal_report_shows_the_references(
        image_run: tuple[str, dict[str, str]]) -> None:
    url, _ = image_run
    out = _invoke("report", "pictures", "--database-url", url)
    assert "images" in out and "/big.png" in out.replace("\n", "")


def test_export_carries_each_image_record(image_run: tuple[str, dict[str, str]],
                                          tmp_path: Path) -> None:
    url, refs = image_run
    out = tmp_path / "answers.jsonl"
    _invoke("export", "pictures", "--database-url", url, "-o", str(out))
    records = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    [image] = records["missed-data"]["images"]
    assert image["ref"] == refs["data"] and len(image["sha256"]) == 64
    assert image["bytes"] == len(png(2))
    assert "images" not in records["missed-text"]
