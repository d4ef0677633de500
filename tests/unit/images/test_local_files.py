"""``file://`` images: what a refusal tells. The CLI's operator is told the resolved path and
the directories to open; a server's client learns neither (finding 13: a link's target, the
open directories)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import ImageError
from app.images import ImagePolicy
from app.images.guard import FetchGuard
from app.images.local import file_path


def _linked_outside(tmp_path: Path) -> tuple[Path, Path, Path]:
    allowed = tmp_path / "open-dir"
    secret = tmp_path / "secret-target"
    allowed.mkdir()
    secret.mkdir()
    (secret / "a.png").write_bytes(b"x")
    (allowed / "link.png").symlink_to(secret / "a.png")
    return allowed, secret, allowed / "link.png"


def test_a_server_refusal_names_neither_the_link_target_nor_the_open_directories(
        tmp_path: Path) -> None:
    allowed, _secret, link = _linked_outside(tmp_path)
    policy = ImagePolicy(allowed_dirs=(allowed.resolve(),), guard=FetchGuard())
    with pytest.raises(ImageError) as caught:
        file_path(link.as_uri(), policy)
    said = caught.value.message.replace(link.as_uri(), "URL")  # the client's own URL aside
    assert "secret-target" not in said and "open-dir" not in said
    assert "outside the directories images may be read from on this server" in said


def test_the_cli_operator_is_told_the_path_and_the_directories(tmp_path: Path) -> None:
    allowed, secret, link = _linked_outside(tmp_path)
    policy = ImagePolicy(allowed_dirs=(allowed.resolve(),))
    with pytest.raises(ImageError) as caught:
        file_path(link.as_uri(), policy)
    said = caught.value.message
    assert str(secret.resolve() / "a.png") in said and str(allowed.resolve()) in said
    assert "DREADS_IMAGE_DIRS" in said


def test_a_file_url_no_parser_reads_is_an_image_error(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"not a valid URL .*file:///path/to/image.png"):
        file_path("file://[x/a.png", ImagePolicy(allowed_dirs=(tmp_path,)))
