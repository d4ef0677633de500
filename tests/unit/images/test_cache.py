"""``ImageCache``: an image fetched once per sha256 while it fits, its bytes checked against the
sha256 stored at submit (changed bytes are ``ImageChanged``, never another picture); and the
stored records."""

from __future__ import annotations

import pytest

from app.errors import ImageChanged, ImageUnreachable
from app.images import ImageCache, ImagePolicy, StoredImage, fetch_image, stored_image
from app.images import stored_images as payload_images
from tests.fixtures.images import ImageServer, data_url, png


async def test_an_image_is_fetched_once_and_then_served_from_memory(
        image_server: ImageServer) -> None:
    url = image_server.add("/a.png", png(1))
    stored = stored_image(fetch_image(url, policy=ImagePolicy()))
    cache = ImageCache(ImagePolicy())
    first = await cache.load(stored)
    again = await cache.load_all((stored, stored))
    assert image_server.hits["/a.png"] == 2  # submit's fetch, then the cache's one
    assert cache.fetches == 1
    assert {i.sha256 for i in (first, *again)} == {stored.sha256}


async def test_changed_bytes_are_image_changed(image_server: ImageServer) -> None:
    url = image_server.add("/a.png", png(1))
    stored = stored_image(fetch_image(url, policy=ImagePolicy()))
    image_server.add("/a.png", png(2))
    with pytest.raises(ImageChanged, match="changed since submit"):
        await ImageCache(ImagePolicy()).load(stored)


async def test_a_cached_image_still_answers_when_its_url_does_not(
        image_server: ImageServer) -> None:
    url = image_server.add("/a.png", png(1))
    stored = stored_image(fetch_image(url, policy=ImagePolicy()))
    cache = ImageCache(ImagePolicy())
    await cache.load(stored)
    image_server.status = 503
    assert (await cache.load(stored)).sha256 == stored.sha256
    with pytest.raises(ImageUnreachable):
        await ImageCache(ImagePolicy()).load(stored)


async def test_the_cache_drops_the_least_recently_used_past_its_bound() -> None:
    refs = [data_url(png(i)) for i in range(3)]
    stored = [stored_image(fetch_image(r, policy=ImagePolicy())) for r in refs]
    cache = ImageCache(ImagePolicy(), max_chars=len(refs[0]) * 2 + 10)
    for item in stored:
        await cache.load(item)
    await cache.load(stored[2])
    await cache.load(stored[0])  # dropped: fetched again
    assert cache.fetches == 4


def test_stored_records_round_trip_and_size_is_the_bytes() -> None:
    body = png(4)
    record = stored_image(fetch_image(data_url(body), policy=ImagePolicy())).to_json()
    assert set(record) == {"ref", "sha256", "media_type", "width", "height", "bytes"}
    assert record["bytes"] == len(body)
    assert payload_images({"images": [record, {"ref": "https://x/y.png"}]}) == (
        StoredImage.from_json(record), StoredImage("https://x/y.png"))
    assert payload_images({"state": "text"}) == ()
