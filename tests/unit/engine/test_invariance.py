"""Batch invariance in the server fingerprint: what ``/server_info`` lists, else what the
operator declared (``DREADS_UPSTREAM_BATCH_INVARIANT``)."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import Settings, run_env
from app.engine.invariance import batch_invariance, observed_batch_invariance
from app.runs.settings import env_engine


@pytest.mark.parametrize(("body", "expected"), [
    ({"vllm_env": {"VLLM_BATCH_INVARIANT": True}}, True),
    ({"vllm_env": {"VLLM_BATCH_INVARIANT": False}}, False),
    ({"vllm_env": {"VLLM_BATCH_INVARIANT": 1}}, True),
    ({"vllm_env": {"VLLM_BATCH_INVARIANT": "0"}}, False),
    ({"vllm_env": {"VLLM_BATCH_INVARIANT": "maybe"}}, None),
    ({"vllm_env": {}}, None),
    ({"vllm_config": "..."}, None),
    (["not", "an", "object"], None),
])
def test_server_info_says_whether_vllm_runs_batch_invariant(body: Any,
                                                            expected: bool | None) -> None:
    assert observed_batch_invariance(body) is expected


@pytest.mark.parametrize(("observed", "declared", "expected"), [
    (True, False, (True, "observed")),  # the server's word wins
    (False, True, (False, "observed")),
    (None, True, (True, "declared")),
    (None, False, (False, "declared")),
    (None, None, (None, None)),
])
def test_the_server_wins_over_the_declaration(observed: bool | None, declared: bool | None,
                                              expected: tuple[bool | None, str | None]) -> None:
    assert batch_invariance(observed, declared) == expected


def test_the_declaration_reaches_the_upstream_config(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_engine(run_env(Settings())).batch_invariant is None
    monkeypatch.setenv("DREADS_UPSTREAM_BATCH_INVARIANT", "1")
    assert env_engine(run_env(Settings())).batch_invariant is True
    monkeypatch.setenv("DREADS_UPSTREAM_BATCH_INVARIANT", "0")
    assert env_engine(run_env(Settings())).batch_invariant is False
