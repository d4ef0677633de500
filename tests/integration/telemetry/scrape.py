"""Reading a ``/metrics`` page as Prometheus would: samples by name and labels."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Samples", "scrape"]


class Samples:
    """The samples of one scrape."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.rows: list[tuple[str, dict[str, str], float]] = [
            (s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]

    @property
    def names(self) -> set[str]:
        return {name for name, _, _ in self.rows}

    def total(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels``."""
        return sum(v for n, ls, v in self.rows
                   if n == name and all(ls.get(k) == x for k, x in labels.items()))

    def by(self, name: str, label: str, **labels: str) -> dict[str, float]:
        """``name`` summed per value of ``label`` (among samples matching ``labels``)."""
        out: dict[str, float] = {}
        for n, ls, v in self.rows:
            if n == name and label in ls and all(ls.get(k) == x for k, x in labels.items()):
                out[ls[label]] = out.get(ls[label], 0.0) + v
        return out


def scrape(url: str, headers: Mapping[str, str] | None = None) -> Samples:
    response = httpx.get(url, headers=dict(headers or {}), timeout=10.0)
    response.raise_for_status()
    return Samples(response.text)
