"""Shared pieces of the simulator unit tests: a valid read body and an in-process client."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from app.engine import Layout, ReadSettings, parse_decision, plan_decision
from app.engine.wire import build_request
from app.sim import SimOptions, create_app
from app.tokenizer.hf import HFTextTokenizer

DECISION = {
    "id": "d1",
    "state": "Clause 4.2: the tenant pays. Clause 9.1: the tenant never pays.",
    "questions": {"conflict": {"type": "noul",
                               "instructions": "Do these two clauses contradict each other?"}},
}


def read_body(tokenizer: HFTextTokenizer, *, seed: int = 1, decision: dict[str, Any] | None = None,
              **overrides: Any) -> dict[str, Any]:
    """A chat body exactly as dreads builds it under its document-first layout (unless
    ``layout`` says otherwise; a deep copy: tests may mutate it)."""
    settings = ReadSettings(**{"layout": Layout.DOCUMENT_FIRST, **overrides})
    plan = plan_decision(parse_decision(decision or DECISION), settings, tokenizer)
    request = build_request(plan.units[0], settings, draw=0, seed=seed,
                            vocab_size=tokenizer.info.vocab_size)
    return copy.deepcopy(dict(request.body))


@pytest.fixture
def body(standin_tokenizer: HFTextTokenizer) -> dict[str, Any]:
    return read_body(standin_tokenizer)


AsgiClient = Callable[..., httpx.AsyncClient]


@pytest.fixture
async def asgi_client() -> AsyncIterator[AsgiClient]:
    """``asgi_client(**SimOptions)`` -> an httpx client talking to the app in-process."""
    clients: list[httpx.AsyncClient] = []

    def _make(**options: Any) -> httpx.AsyncClient:
        app = create_app(SimOptions(**options))
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                   base_url="http://sim")
        client.sim_app = app  # type: ignore[attr-defined]
        clients.append(client)
        return client

    yield _make
    for client in clients:
        await client.aclose()
