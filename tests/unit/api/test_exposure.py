"""``dreads serve`` never starts open beyond this machine, nor with a placeholder key."""

from __future__ import annotations

import pytest

from app.cli.serve import check_exposure
from app.errors import ConfigError


@pytest.mark.parametrize(("host", "key"), [("127.0.0.1", None), ("localhost", None),
                                           ("0.0.0.0", "k7Jx9-long-random-0123"), ("::1", None)])
def test_allowed(host: str, key: str | None) -> None:
    check_exposure(host, key, insecure=False)


@pytest.mark.parametrize(("host", "key", "needle"), [
    ("0.0.0.0", None, "dreads serve on 0.0.0.0 needs DREADS_API_KEY"),
    ("10.0.0.5", "", "needs DREADS_API_KEY"),
    ("127.0.0.1", "changethis", "DREADS_API_KEY is a placeholder ('changethis')"),
])
def test_refused_with_what_to_set(host: str, key: str | None, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_exposure(host, key, insecure=False)
    assert needle in err.value.message
    check_exposure(host, key, insecure=True)



@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::"])
def test_a_short_key_is_refused_beyond_loopback_even_insecure(host: str) -> None:
    for insecure in (False, True):
        with pytest.raises(ConfigError) as err:
            check_exposure(host, "k", insecure=insecure)
        assert f"DREADS_API_KEY has 1 characters; dreads serve on {host} needs at least 16" \
            in err.value.message
    check_exposure("127.0.0.1", "k", insecure=False)  # this machine only: the user's choice
