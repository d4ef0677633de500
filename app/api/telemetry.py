"""``GET /metrics`` of ``dreads serve``: the API's request metrics
(``prometheus-fastapi-instrumentator``), the per-run gauges read from SQL
(``app.telemetry.RunMetrics``) and this process's own metrics (with ``--executor local`` the
runner's read, attempt and answer counters too). Behind the API key, as a bearer token.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_fastapi_instrumentator import Instrumentator

from app.api.auth import require_key
from app.telemetry import RunMetrics, exposition

__all__ = ["instrument", "register_run_metrics", "router"]

router = APIRouter(tags=["metrics"], dependencies=[Depends(require_key)])


def instrument(app: FastAPI) -> None:
    """Count and time every request into the app's own registry (``app.state.metrics``)."""
    registry = CollectorRegistry()
    app.state.metrics = registry
    Instrumentator(registry=registry, excluded_handlers=["/metrics", "/health"],
                   should_group_untemplated=True).instrument(app)


def register_run_metrics(app: FastAPI, collector: RunMetrics) -> None:
    app.state.metrics.register(collector)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus' text format."""
    body = await asyncio.to_thread(exposition, request.app.state.metrics)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
