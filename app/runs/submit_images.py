"""Submit's images: every image of a batch fetched and checked once (at most ``FETCHERS`` at a
time, an image several lines share once per submission), and the per-decision outcome: the
records to store, or the reason the decision is rejected.

A decision is rejected when one of its images cannot be used (unreadable, not an image, over
``DREADS_IMAGE_MAX_BYTES``, a ``file://`` outside ``DREADS_IMAGE_DIRS``, a URL that does not
answer), or when its run reads by ``--endpoint completions`` (token ids cannot carry an
image). The other lines are stored and run.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from app.engine import Decision, Endpoint, ReadSettings
from app.errors import ImageError
from app.images import ImagePolicy, StoredImage, fetch_image, stored_image
from app.images.fetcher import ImageFetcher
from app.images.limits import over_total, too_many_images
from app.runs.jobfile import LineProblem, bounded_memo

__all__ = ["COMPLETIONS_REFUSED", "FETCHERS", "BatchImages", "SubmitImages"]

#: Images fetched at once at submit.
FETCHERS = 16
#: Why an image decision of a run that reads by completions is rejected.
COMPLETIONS_REFUSED = ("its images need the chat endpoint: completions by token ids cannot "
                       "carry an image; submit the file to a run with --endpoint chat")


@dataclass
class BatchImages:
    """One batch's outcome: the stored image records per decision id, and the rejections."""

    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rejected: dict[str, LineProblem] = field(default_factory=dict)


class SubmitImages:
    """Fetches and checks the images of one submission (``close`` when done)."""

    def __init__(self, policy: ImagePolicy) -> None:
        self.policy = policy
        self._checked: dict[str, StoredImage | str] = {}  #: ref -> record or why not
        self._client: ImageFetcher | None = None
        self._pool: ThreadPoolExecutor | None = None

    def check(self, decisions: Sequence[tuple[int, Decision]],
              settings: ReadSettings) -> BatchImages:
        """The image records and rejections of a batch's decisions (text decisions: none)."""
        out = BatchImages()
        with_images = [(n, d) for n, d in decisions if d.images]
        if not with_images:
            return out
        if settings.endpoint is Endpoint.COMPLETIONS:
            out.rejected = {d.id: LineProblem(n, d.id, COMPLETIONS_REFUSED)
                            for n, d in with_images}
            return out
        too_many = {d.id: LineProblem(n, d.id, reason) for n, d in with_images
                    if (reason := too_many_images(len(d.images), self.policy)) is not None}
        out.rejected.update(too_many)
        with_images = [(n, d) for n, d in with_images if d.id not in too_many]
        self._fetch({ref for _, d in with_images for ref in d.images})
        for line_no, decision in with_images:
            checked = [self._checked[ref] for ref in decision.images]
            problem = next((c for c in checked if isinstance(c, str)), None)
            if problem is None:
                problem = over_total(sum(c.size or 0 for c in checked
                                         if isinstance(c, StoredImage)), self.policy)
            if problem is not None:
                out.rejected[decision.id] = LineProblem(line_no, decision.id, problem)
            else:
                out.records[decision.id] = [c.to_json() for c in checked
                                            if isinstance(c, StoredImage)]
        return out

    def _fetch(self, refs: set[str]) -> None:
        bounded_memo(self._checked)  # emptied when full: memory stays flat
        missing = [ref for ref in refs if ref not in self._checked]
        if not missing:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(FETCHERS, thread_name_prefix="dreads-image")
            self._client = ImageFetcher(self.policy)
        for ref, outcome in zip(missing, self._pool.map(self._one, missing), strict=True):
            self._checked[ref] = outcome

    def _one(self, ref: str) -> StoredImage | str:
        try:
            return stored_image(fetch_image(ref, policy=self.policy, client=self._client))
        except ImageError as exc:
            return exc.message

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        if self._client is not None:
            self._client.close()
