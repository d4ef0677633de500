"""The browser pages of ``dreads serve``: ``/runs`` (every run), ``/runs/{run}`` (one run,
live), ``/runs/{run}/report`` (the HTML report), ``/login``.

Server-rendered HTML (Jinja2) with a little JavaScript on the run page that polls
``/runs/{run}/live`` (JSON, ``app.api.live``) every two seconds; no front-end build. Behind the
API key: a login sets a session cookie (``app.api.session``).
"""

from __future__ import annotations

import asyncio
import hmac
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from app.api.session import COOKIE, SESSION_S, authorized, safe_next, session_token
from app.api.state import ApiState
from app.engine import SIMULATOR_NOTE
from app.store.db import session_scope
from app.store.runs import RunInfo, find_run
from app.store.views import list_runs

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
POLL_MS = 2000

_templates = Environment(loader=PackageLoader("app.api", "templates"),
                         autoescape=select_autoescape(["html"]))


def _html(template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_templates.get_template(template).render(**context),
                        status_code=status_code)


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)


def _api(request: Request) -> ApiState:
    state: ApiState = request.app.state.api
    return state


def _find(api: ApiState, name: str) -> RunInfo | None:
    with session_scope(api.factory) as session:
        return find_run(session, name)


@router.get("/login")
async def login_form(next_: Annotated[str | None, Query(alias="next")] = None) -> HTMLResponse:
    return _html("login.html", next=safe_next(next_), hours=SESSION_S // 3600, error=None)


@router.post("/login")
async def login(request: Request, key: Annotated[str, Form()],
                next_: Annotated[str | None, Form(alias="next")] = None) -> Response:
    expected = _api(request).config.api_key
    target = safe_next(next_)
    if expected and not _same(key, expected):
        return _html("login.html", 401, next=target, hours=SESSION_S // 3600,
                     error="That is not this server's API key.")
    response = RedirectResponse(target, status_code=303)
    if expected:
        response.set_cookie(COOKIE, session_token(expected), max_age=SESSION_S, httponly=True,
                            samesite="strict", secure=request.url.scheme == "https")
    return response


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


@router.get("/runs")
async def runs_page(request: Request) -> Response:
    if not authorized(request):
        return _to_login(request)
    api = _api(request)

    def _list() -> list[dict[str, Any]]:
        with session_scope(api.factory) as session:
            return [{"name": o.run.name, "status": o.state.value,
                     "simulator": o.run.simulator, "replicates": o.run.replicates,
                     "total": sum(o.counts.values()), "done": o.counts.get("done", 0),
                     "created": o.run.created_at.strftime("%Y-%m-%d %H:%M")
                     if o.run.created_at else None} for o in list_runs(session)]

    return _html("runs.html", runs=await asyncio.to_thread(_list))


@router.get("/runs/{run}")
async def run_page(run: str, request: Request) -> Response:
    if not authorized(request):
        return _to_login(request)
    view = await asyncio.to_thread(_live, _api(request), run)
    if view is None:
        return _html("runs.html", 404, runs=[])
    base = f"/runs/{quote(run, safe='')}"
    return _html("run.html", name=run, initial=view, simulator_note=SIMULATOR_NOTE,
                 live_url=f"{base}/live", report_url=f"{base}/report", poll_ms=POLL_MS)


@router.get("/runs/{run}/live")
async def run_live(run: str, request: Request) -> JSONResponse:
    if not authorized(request):
        return JSONResponse({"error": "log in at /login"}, status_code=401)
    view = await asyncio.to_thread(_live, _api(request), run)
    if view is None:
        return JSONResponse({"error": f"no run named {run!r}"}, status_code=404)
    return JSONResponse(view, headers={"cache-control": "no-store"})


def _live(api: ApiState, name: str) -> dict[str, Any] | None:
    from app.api.live import live_view

    with session_scope(api.factory) as session:
        info = find_run(session, name)
        return live_view(session, info) if info is not None else None


@router.get("/runs/{run}/report")
async def run_report(run: str, request: Request) -> Response:
    if not authorized(request):
        return _to_login(request)
    api = _api(request)
    if await asyncio.to_thread(_find, api, run) is None:
        return _html("runs.html", 404, runs=[])
    return HTMLResponse(await asyncio.to_thread(_report, api, run))


def _report(api: ApiState, name: str) -> str:
    from app.report.document import report_from_rows
    from app.report.html import render_html
    from app.report.load import load_run_rows, resolve_run

    with session_scope(api.factory) as session:
        data = load_run_rows(session, resolve_run(session, name))
        doc = report_from_rows(session, data)
    return render_html(doc, data.rows, images=api.config.images)
