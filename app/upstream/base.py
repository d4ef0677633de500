"""How a read reaches a model: an ``Upstream`` answers ReadRequests.

Implementations: ``vllm.VllmUpstream`` (HTTP to vLLM or to ``dreads sim``) and the in-process
transformers engine (``app.connect.engines`` says which builds it). dreads' own reads
(``app.runs.answer.ReadsSource``) depend only on this Protocol; who answers a decision (reads
or a decision endpoint) is the other seam, ``app.runs.answer.AnswerSource``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from app.engine.types import ReadRequest, ReadResult, ServerFingerprint

__all__ = ["Upstream", "WaitProgress"]

#: Told, while ``wait_ready`` waits, the seconds waited so far and why it is not ready yet.
WaitProgress = Callable[[float, str], None]


class Upstream(Protocol):
    #: "vllm", "sim" or "transformers": recorded on the run.
    engine: str

    @property
    def max_model_len(self) -> int | None:
        """The server's context length once known (``fingerprint`` or ``wait_ready`` asked),
        else None: a read whose prompt and canvas exceed it is refused before it is sent."""
        ...

    async def read(self, request: ReadRequest) -> ReadResult:
        """Send one read. Raises UpstreamUnavailable (after its own retries), UpstreamRejected
        or MalformedResponse (app.errors)."""
        ...

    async def fingerprint(self) -> ServerFingerprint:
        """Served model id, max_model_len, version, canvas length."""
        ...

    async def wait_ready(self, *, timeout_s: float, probe: ReadRequest | None = None,
                         progress: WaitProgress | None = None) -> None:
        """Wait until the model list answers and, if given, one real read succeeds (telling
        ``progress`` after each try that failed). Raises UpstreamUnavailable on timeout."""
        ...

    async def aclose(self) -> None: ...
