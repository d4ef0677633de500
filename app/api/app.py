"""``create_app(config)``: the FastAPI application of ``dreads serve``.

    GET  /health                       liveness (no key)
    GET  /v1/models                    the served model: OpenAI's list and Jev's aliases
    POST /v1/systemone                 Jev: one decision, answered at once
    POST /v1/decisions                 OpenAI's Decisions API: one decision, answered at once
    POST /v1/runs                      submit JSON lines as a run
    GET  /v1/runs                      list runs
    GET  /v1/runs/{run}                status (as ``dreads status --json``)
    GET  /v1/runs/{run}/results        JSON lines (as ``dreads export``)
    POST /v1/runs/{run}/resume|cancel
    GET  /metrics                      Prometheus: requests, per-run gauges from SQL
    GET  /runs, /runs/{run}            browser pages: runs, one run live (login: API key)

OpenAPI docs at ``/docs``. Every response carries ``x-request-id``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from app.api import decisions, pages, runs, systemone, telemetry
from app.api.config import ServeConfig
from app.api.failures import install_error_answers
from app.api.middleware import BodyGuard, RequestContext
from app.api.site_guard import HostGuard, SiteGuard
from app.api.state import build_state
from app.api.systemone_body import document_systemone_body
from app.telemetry import RunMetrics
from app.upstream.log_redaction import redact_logs

__all__ = ["create_app", "create_app_from_env"]


def create_app(config: ServeConfig) -> FastAPI:
    redact_logs()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            app.state.api = await build_state(config, stack)
            telemetry.register_run_metrics(app, RunMetrics(
                app.state.api.factory, ttl_s=config.metrics_cache_s,
                max_runs=config.metrics_max_runs))
            yield

    app = FastAPI(title="dreads", summary="Diffusion reads over HTTP: runs, Jev's "
                  "/v1/systemone and OpenAI's /v1/decisions on a self-hosted model.",
                  lifespan=lifespan)
    app.include_router(systemone.router)
    app.include_router(decisions.router)
    app.include_router(runs.router)
    app.include_router(telemetry.router)
    app.include_router(pages.router)
    install_error_answers(app)
    app.add_middleware(BodyGuard, max_bytes=config.max_body_bytes,
                       max_upload_bytes=config.max_upload_bytes,
                       upload_paths=frozenset({"/v1/runs"}),
                       openai_paths=frozenset({"/v1/decisions"}))
    app.add_middleware(SiteGuard, allowed_origins=config.allowed_origins,
                       openai_paths=frozenset({"/v1/decisions"}))
    app.add_middleware(HostGuard, allowed=config.allowed_hosts)
    app.add_middleware(RequestContext)
    telemetry.instrument(app)
    document_systemone_body(app)
    return app


def create_app_from_env() -> FastAPI:
    """The app configured from ``DREADS_*`` alone, built the way ``dreads serve`` builds it
    (``uvicorn --factory app.api:create_app_from_env``); model and tokenizer set nowhere are
    asked of the upstream once (a ``ConfigError`` if it does not answer)."""
    from app.api.config import serve_config, serve_upstream
    from app.config import get_settings, run_env
    from app.runs.settings import base_read_settings, engine_choice
    from app.store.urls import database_url

    env = get_settings()
    choice = engine_choice(None, engine=None, device=None, dtype=None, env=run_env(env))
    url = serve_upstream(env, choice, None, None)
    settings = base_read_settings({}, engine=choice.engine, upstream=url, env=run_env(env))
    return create_app(serve_config(env, upstream=url, settings=settings,
                                   database_url=database_url(env.database_url), engine=choice))
