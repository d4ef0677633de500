"""``is_simulator``: the one rule that names the simulator, for the run records and the server
answers every surface labels."""

from __future__ import annotations

import pytest

from app.engine import ServerFingerprint, is_simulator
from app.store.records import RunInfo

VLLM = {"engine": "vllm", "model_id": "dgemma", "version": "0.33.0"}
SIM_APART = {"engine": "sim", "model_id": "dgemma", "version": "dreads-sim 0.1.0"}


def _run(upstream: str, fingerprint: dict[str, str] | None,
         settings: dict[str, str] | None = None) -> RunInfo:
    return RunInfo(id=1, name="r", status="active", settings=settings or {}, settings_hash="h",
                   fingerprint=fingerprint, upstream=upstream, engine="vllm", source=None,
                   replicates=1, created_at=None)


@pytest.mark.parametrize(("upstream", "fingerprint", "expected"), [
    ("sim", None, True),  # started in the process, before any fingerprint
    ("http://10.0.0.7:8001", SIM_APART, True),  # a dreads sim started apart
    ("http://10.0.0.7:8001", {"engine": "vllm", "version": "dreads-sim 0.1.0"}, True),
    ("http://10.0.0.7:8001", VLLM, False),
    ("http://10.0.0.7:8001", None, False),  # not reached yet: nothing says so
])
def test_a_run_by_reads(upstream: str, fingerprint: dict[str, str] | None,
                        expected: bool) -> None:
    assert is_simulator(upstream, fingerprint) is expected
    assert _run(upstream, fingerprint).simulator is expected


def test_a_fingerprint_and_a_version_alone() -> None:
    fp = ServerFingerprint(engine="sim", model_id="dgemma", max_model_len=8192,
                           version="dreads-sim 0.1.0", canvas_length=320)
    assert is_simulator(fingerprint=fp)
    assert is_simulator(version="dreads-sim 0.1.0")
    assert not is_simulator(version="0.33.0") and not is_simulator()


@pytest.mark.parametrize(("answer_url", "expected"), [
    ("sim", True), ("https://api.openai.com/v1", False)])
def test_a_run_by_a_decision_endpoint_is_its_endpoints(answer_url: str, expected: bool) -> None:
    settings = {"answer_by": "decisions", "answer_url": answer_url}
    # the reads' upstream of such a run answers nothing: it does not decide
    assert _run("sim", None, settings).simulator is expected
    assert is_simulator("sim", SIM_APART, settings=settings) is expected
