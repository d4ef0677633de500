"""``app.images``: each kind of reference fetched and checked, and each way an image is refused
(one clear message naming the reference and what to do)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from app.errors import ImageError, ImageUnreachable
from app.images import ImagePolicy, fetch_image, fetch_image_async, parse_image_dirs
from tests.fixtures.images import ImageServer, data_url, png


def test_a_data_url_is_decoded_checked_and_hashed() -> None:
    body = png(1)
    image = fetch_image(data_url(body), policy=ImagePolicy())
    assert (image.media_type, image.width, image.height) == ("image/png", 24, 16)
    assert image.sha256 == hashlib.sha256(body).hexdigest()
    assert image.url == data_url(body)
    assert image.ref == data_url(body)


def test_the_media_type_comes_from_the_bytes_not_from_the_declaration() -> None:
    image = fetch_image(data_url(png(2), "image/jpeg"), policy=ImagePolicy())
    assert image.media_type == "image/png"
    assert image.url.startswith("data:image/png;base64,")


def test_an_allowed_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(png(3))
    policy = ImagePolicy(allowed_dirs=parse_image_dirs(str(tmp_path)))
    image = fetch_image((tmp_path / "a.png").as_uri(), policy=policy)
    assert image.sha256 == hashlib.sha256(png(3)).hexdigest()


def test_a_file_outside_the_allowed_directories_is_refused(tmp_path: Path) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (outside / "a.png").write_bytes(png(4))
    (inside / "link.png").symlink_to(outside / "a.png")
    policy = ImagePolicy(allowed_dirs=parse_image_dirs(str(inside)))
    for ref in ((outside / "a.png").as_uri(), (inside / "link.png").as_uri(),
                f"file://{inside}/../out/a.png"):
        with pytest.raises(ImageError, match="outside the directories images may be read "
                           r"from .*DREADS_IMAGE_DIRS"):
            fetch_image(ref, policy=policy)
    with pytest.raises(ImageError, match=r"\(none\)"):
        fetch_image((outside / "a.png").as_uri(), policy=ImagePolicy())


def test_a_missing_file_is_unreadable(tmp_path: Path) -> None:
    policy = ImagePolicy(allowed_dirs=(tmp_path,))
    with pytest.raises(ImageError, match=r"cannot be read .*exists"):
        fetch_image((tmp_path / "gone.png").as_uri(), policy=policy)


@pytest.mark.parametrize(("ref", "match"), [
    (data_url(b"hello, not an image"), "not an image pillow can read"),
    (data_url(png(5)[:40]), "not an image pillow can read"),
    ("data:text/plain;base64,aGVsbG8=", "declared as text/plain, not an image"),
    ("data:image/png;base64,@@@", "cannot be decoded"),
    ("ftp://example.org/a.png", "not an http"),
])
def test_what_is_not_an_image_is_refused(ref: str, match: str) -> None:
    with pytest.raises(ImageError, match=match):
        fetch_image(ref, policy=ImagePolicy())


def test_an_image_over_the_limit_is_refused(tmp_path: Path, image_server: ImageServer) -> None:
    body = png(6)
    policy = ImagePolicy(allowed_dirs=(tmp_path,), max_bytes=len(body) - 1)
    (tmp_path / "a.png").write_bytes(body)
    url = image_server.add("/a.png", body)
    for ref in (data_url(body), (tmp_path / "a.png").as_uri(), url):
        with pytest.raises(ImageError, match=r"over the limit of .*DREADS_IMAGE_MAX_BYTES"):
            fetch_image(ref, policy=policy)
    assert fetch_image(url, policy=ImagePolicy(max_bytes=len(body))).sha256


def test_an_http_image_is_fetched_and_its_errors_say_what_answered(
        image_server: ImageServer) -> None:
    url = image_server.add("/chart.png", png(7))
    assert fetch_image(url, policy=ImagePolicy()).width == 24
    with pytest.raises(ImageUnreachable, match="HTTP 404") as missing:
        fetch_image(image_server.url + "/nothing.png", policy=ImagePolicy())
    assert missing.value.status == 404
    page = image_server.add("/page.html", b"<html></html>", "text/html; charset=utf-8")
    with pytest.raises(ImageError, match="declared as text/html"):
        fetch_image(page, policy=ImagePolicy())
    image_server.status = 503
    with pytest.raises(ImageUnreachable, match="HTTP 503"):
        fetch_image(url, policy=ImagePolicy())


def test_an_unreachable_url_is_image_unreachable() -> None:
    from tests.fixtures.services import free_port

    with pytest.raises(ImageUnreachable, match=r"unreachable .*server is up"):
        fetch_image(f"http://127.0.0.1:{free_port()}/a.png", policy=ImagePolicy(timeout_s=2))


async def test_the_async_twin_gives_the_same_image(image_server: ImageServer,
                                                   tmp_path: Path) -> None:
    body = png(8)
    url = image_server.add("/b.png", body)
    (tmp_path / "b.png").write_bytes(body)
    policy = ImagePolicy(allowed_dirs=(tmp_path.resolve(),))
    got = [await fetch_image_async(ref, policy=policy)
           for ref in (url, data_url(body), (tmp_path / "b.png").as_uri())]
    assert {g.sha256 for g in got} == {hashlib.sha256(body).hexdigest()}
    assert [g.ref for g in got] == [url, data_url(body), (tmp_path / "b.png").as_uri()]


def test_a_long_data_url_is_shortened_in_messages() -> None:
    ref = data_url(b"x" * 5000)
    with pytest.raises(ImageError) as refused:
        fetch_image(ref, policy=ImagePolicy())
    assert len(refused.value.message) < 300
    assert "characters)" in refused.value.message
