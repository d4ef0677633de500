"""The simulator's ``GET /metrics``: the vLLM gauges a dashboard watches, in Prometheus' text
format and under vLLM's names, so the monitoring stack is the same with the simulator.

Reads admitted to the batch model are "running" up to ``max_batch`` and "waiting" beyond it;
the KV-cache use is the running share of ``max_batch`` (the simulator has no cache to fill).
"""

from __future__ import annotations

from app.sim.capacity import BatchModel

__all__ = ["CONTENT_TYPE", "render_metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
)


def render_metrics(model: str, batch: BatchModel, *, reads: int) -> bytes:
    """The gauges for ``model`` now, and the reads answered so far."""
    queued = batch.queued
    running = min(queued, batch.max_batch)
    values = (running, max(0, queued - batch.max_batch), running / batch.max_batch)
    label = '{model_name="' + model.replace("\\", "\\\\").replace('"', '\\"') + '"}'
    lines = []
    for (name, help_text), value in zip(_GAUGES, values, strict=True):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name}{label} {value}"]
    lines += ["# HELP vllm:request_success_total Reads answered.",
              "# TYPE vllm:request_success_total counter",
              f"vllm:request_success_total{label} {reads}"]
    return ("\n".join(lines) + "\n").encode()
