"""Runs over HTTP: submit a JSONL file, read status and results, resume, cancel, delete.

The same calls as ``dreads submit/status/export/resume/cancel/delete``; execution goes to the
server's executor (this process, or the Celery workers). Uploads are read line by line as the
CLI reads files (``app.runs.jobfile``): a line that is not UTF-8 is a bad line, not a failed upload.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Annotated, Any, Literal
from urllib.parse import quote

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.datastructures import UploadFile

from app.api.answer_urls import check_answer_url
from app.api.auth import require_key
from app.api.errors import api_error, raise_for
from app.api.schemas import as_value_error
from app.api.state import ApiState
from app.api.systemone import Api
from app.connect.plugins import find_source
from app.engine import (
    Endpoint,
    Layout,
    PolicyName,
    ReadMode,
    ReadSettings,
    ServerFingerprint,
    check_settings,
    plans_reads,
    settings_from_dict,
)
from app.engine.limits import check_run_name
from app.errors import ConfigError, DreadsError
from app.runs.jobfile import decode_lines, has_content
from app.runs.read_options import READ_OPTIONS, REPLICATES, read_option, read_overrides
from app.runs.resume import ResumeOptions, resume_run
from app.runs.submission import Resolved, Submission, submit_run
from app.runs.submit import SubmitReport
from app.store.admin import cancel_run, delete_run, run_contents
from app.store.db import session_scope
from app.store.openai_export import iter_openai_batch
from app.store.runs import RunInfo, find_run
from app.store.types import Session
from app.store.views import iter_export, list_runs, run_status
from app.tokenizer.hf import load_tokenizer

__all__ = ["router"]

router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[Depends(require_key)])

_SPOOL_BYTES = 16 * 1024 * 1024
JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines",
               "application/json", "text/plain")


def _read_param(name: str) -> Any:
    """The query parameter of read option ``name``, as ``app.runs.read_options`` declares it:
    not given by default, its bounds and description."""
    option = read_option(name)
    limits: dict[str, Any] = {"ge": option.minimum, "min_length": option.api_min_length,
                              "description": option.api_help}
    return Field(None, **{key: value for key, value in limits.items() if value is not None})


#: The read options ``POST /v1/runs`` takes, by their parameter names.
READ_PARAMS = frozenset(option.name for option in READ_OPTIONS if option.api)


class ReadParams(BaseModel):
    """Read settings as query parameters (those ``dreads submit`` and ``dreads resume`` take
    as options; each declared in ``app.runs.read_options``, the type restated here for the
    schema). Model, tokenizer and canvas are the server's."""

    model_config = ConfigDict(extra="forbid")

    policy: PolicyName | None = _read_param("policy")
    draws: int | None = _read_param("draws")
    threshold: float | None = _read_param("threshold")
    max_draws: int | None = _read_param("max_draws")
    mode: ReadMode | None = _read_param("mode")
    layout: Layout | None = _read_param("layout")
    steps: int | None = _read_param("steps")
    canvas_step: int | None = _read_param("canvas_step")
    constrained: bool | None = _read_param("constrained")
    endpoint: Endpoint | None = _read_param("endpoint")
    seed: int | None = _read_param("seed")
    answer_by: str | None = _read_param("answer_by")
    answer_url: str | None = _read_param("answer_url")
    answer_rps: float | None = _read_param("answer_rps")
    answer_concurrency: int | None = _read_param("answer_concurrency")
    model: str | None = _read_param("model")

    @field_validator("answer_by")
    @classmethod
    def _known_source(cls, value: str | None) -> str | None:
        """A source this server knows, or an installed plugin's (``app.connect.plugins``)."""
        if value is None:
            return None
        try:
            return str(find_source(value).name)
        except DreadsError as exc:
            raise ValueError(exc.message) from None

    def overrides(self) -> dict[str, Any]:
        """The ``ReadSettings`` fields given (``app.runs.read_options.read_overrides``)."""
        return read_overrides(self.model_dump(include=set(READ_PARAMS)))


class SpendParams(ReadParams):
    """The run's token prices and budget (``--price-input``, ``--price-output``,
    ``--max-cost``): recorded with it, not run settings."""

    price_input: float | None = Field(None, ge=0.0, description="Dollars per million input "
                                      "tokens, recorded with the run.")
    price_output: float | None = Field(None, ge=0.0, description="Dollars per million output "
                                       "tokens, recorded with the run.")
    max_cost: float | None = Field(None, ge=0.0, description="The run's budget in dollars: it "
                                   "pauses once its recorded cost reaches it.")

    def prices(self) -> dict[str, float | None]:
        return {"price_input_per_mtok": self.price_input,
                "price_output_per_mtok": self.price_output, "max_cost": self.max_cost}


class RunParams(SpendParams):
    """Query parameters of ``POST /v1/runs``: the run's name and read settings; settings not
    given default to the server's."""

    run: str = Field(description="Run name (new or existing): 1 to 200 characters, no "
                     "control character, no '/' and no '..'.")
    replicates: int | None = Field(None, ge=REPLICATES.minimum)
    strict: bool = Field(False, description="Refuse the whole file if a line is bad.")
    replace_changed: bool = Field(False, description="A line whose id the run holds with other "
                                  "content replaces the stored decision when nothing has read "
                                  "it yet; answered ones are kept (and listed in 'changed').")

    @field_validator("run")
    @classmethod
    def _storable_name(cls, value: str) -> str:
        """The name the CLI would take (``app.engine.limits.check_run_name``)."""
        return as_value_error(check_run_name, value)

    def settings(self, base: ReadSettings, upstream: str) -> ReadSettings:
        """``base`` with these parameters; a run answered by a decision endpoint defaults to
        this server's upstream (vLLM's own reader on the same pod).

        Raises:
            ConfigError: ``model`` for a run answered by reads, or an impossible setting.
        """
        settings = replace(base, **self.overrides())
        if plans_reads(settings.answer_by):
            if self.model is not None and self.model != base.model:
                raise ConfigError(f"model {self.model!r}: this server reads {base.model!r}; "
                                  "another model only answers a run by a decision endpoint "
                                  "(answer_by)")
            return check_settings(settings)
        if not settings.answer_url:
            settings = replace(settings, answer_url=upstream)
        return check_settings(settings)


def _not_found(name: str) -> Exception:
    return api_error(404, "not_found_error", f"no run named {name!r}; GET /v1/runs lists them")


def _required(session: Session, name: str) -> RunInfo:
    info = find_run(session, name)
    if info is None:
        raise _not_found(name)
    return info


def _find(api: ApiState, name: str) -> RunInfo:
    with session_scope(api.factory) as session:
        return _required(session, name)


def _same_model(api: ApiState, info: RunInfo) -> ReadSettings:
    settings = settings_from_dict(dict(info.settings))
    if settings.model != api.model and plans_reads(settings.answer_by):
        raise api_error(409, "conflict_error",
                        f"run {info.name!r} reads model {settings.model!r}; this server serves "
                        f"{api.model!r}. Continue it with `dreads resume` against its own "
                        "server, or submit under a new run name")
    return settings


async def _spool(request: Request) -> tuple[IO[bytes], str]:
    """The uploaded JSONL as a file: the multipart ``file`` field, or the whole body."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        form = await request.form()
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise api_error(422, "invalid_request_error",
                            "a multipart upload needs the JSONL in a field named 'file' "
                            "(curl -F file=@jobs.jsonl)")
        return upload.file, upload.filename or "upload.jsonl"
    if content_type and content_type not in JSONL_TYPES:
        raise api_error(415, "invalid_request_error",
                        f"send JSON lines as application/x-ndjson (or multipart/form-data "
                        f"with a 'file' field), not {content_type}")
    spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115
    async for chunk in request.stream():
        await asyncio.to_thread(spool.write, chunk)
    spool.seek(0)
    return spool, "request body"


def _require_lines(raw: IO[bytes], source: str) -> None:
    """Refuse an upload with nothing but whitespace: it would make an empty run."""
    if not has_content(raw):
        raise api_error(400, "invalid_request_error",
                        f"the {source} has no decisions (it is empty or only blank lines); "
                        "send JSON lines, one decision per line")
    raw.seek(0)


def _submit(api: ApiState, params: RunParams, raw: IO[bytes], source: str,
            fingerprint: ServerFingerprint | None) -> SubmitReport:
    submission = Submission(Path(source), params.run, params.replicates, params.strict,
                            params.replace_changed, images=api.config.images,
                            prices=params.prices())

    def resolve(existing: RunInfo | None) -> Resolved:
        base = _same_model(api, existing) if existing else api.settings
        settings = params.settings(base, api.config.answer_url or api.config.upstream)
        return Resolved(settings, api.config.upstream, api.config.engine,
                        load_tokenizer(settings.tokenizer),
                        fingerprint=fingerprint if plans_reads(settings.answer_by)
                        else None)

    return submit_run(api.factory, submission, resolve, lines=decode_lines(raw),
                      publisher_for=lambda request: api.executor.publisher(
                          request.run_name, request.settings)).report


def _links(name: str) -> dict[str, str]:
    """The run's routes, its name percent-encoded (a space, a '#', any script)."""
    path = f"/v1/runs/{quote(name, safe='')}"
    return {"status": path, "results": f"{path}/results"}


@router.post("", status_code=201, responses={
    200: {"description": "Lines added to an existing run."},
    400: {"description": "--strict and a bad line: nothing written; or no lines at all."},
    409: {"description": "The run exists with other settings; or lines changed under ids the "
                         "run holds were kept as stored (the error's report lists them in "
                         "'changed'; the other lines are stored and run)."}},
    openapi_extra={"requestBody": {"content": {
        "application/x-ndjson": {"schema": {"type": "string"}},
        "multipart/form-data": {"schema": {"type": "object", "properties": {
            "file": {"type": "string", "format": "binary"}}}}}}})
async def submit(request: Request, params: Annotated[RunParams, Query()], api: Api
                 ) -> JSONResponse:
    """Submit JSON lines (the body, or a multipart ``file``) as run ``run``: the report has
    every refused line with its number and reason (a line that is not UTF-8 included); the good
    lines are stored and run."""
    check_answer_url(params.answer_url, api.config)
    raw, source = await _spool(request)
    fingerprint = await api.fingerprint()
    try:
        await asyncio.to_thread(_require_lines, raw, source)
        report = await asyncio.to_thread(_submit, api, params, raw, source, fingerprint)
    except DreadsError as exc:
        raise_for(exc)
    finally:
        raw.close()
    body = report.as_dict()
    if report.refused:
        raise api_error(400, "invalid_request_error",
                        f"strict: {len(report.bad)} bad line(s) and {len(report.rejected)} "
                        "unreadable decision(s); nothing was written", report=body)
    if report.run is None:
        raise api_error(400, "invalid_request_error",
                        f"none of the {report.lines} line(s) is a valid decision (see "
                        "report.bad_lines); nothing was written", report=body)
    assert report.run is not None
    body["execution"] = await api.executor.started(report.run, report.publish)
    body["links"] = _links(report.run.name)
    if report.changed:
        raise api_error(409, "conflict_error", _changed_message(report), report=body)
    return JSONResponse(body, status_code=201 if report.created else 200)


def _changed_message(report: SubmitReport) -> str:
    ids = ", ".join(p.key or "" for p in report.changed[:10])
    more = " …" if len(report.changed) > 10 else ""
    return (f"{len(report.changed)} line(s) changed under an existing id (ids: {ids}{more}): the "
            "stored decision is kept; the other lines are stored (see report). To ask them "
            "again, submit to a new run, or pass replace_changed=true to replace those not "
            "yet answered")


@router.get("")
async def runs(api: Api) -> dict[str, Any]:
    """Every run with its settings and decision counts by status (``dreads runs --json``)."""
    def _list() -> list[dict[str, Any]]:
        with session_scope(api.factory) as session:
            return [o.as_dict() for o in list_runs(session)]

    return {"runs": await asyncio.to_thread(_list)}


@router.get("/{run}")
async def status(run: str, api: Api) -> dict[str, Any]:
    """Counts, per-cell failures and diagnostics, rate and ETA (``dreads status --json``),
    plus how this server is executing it."""
    def _status() -> tuple[RunInfo, dict[str, Any]]:
        with session_scope(api.factory) as session:
            info = _required(session, run)
            return info, run_status(session, info).as_dict()

    info, report = await asyncio.to_thread(_status)
    return {**report, "execution": api.executor.state(info), "links": _links(run)}


@router.get("/{run}/results", response_class=StreamingResponse, responses={200: {
    "content": {"application/x-ndjson": {}},
    "description": "One JSON line per decision, as `dreads export`."}})
async def results(run: str, api: Api, fmt: Annotated[Literal["jsonl", "openai-batch"], Query(
        alias="format", description="jsonl (dreads' lines) or openai-batch (OpenAI's Batch "
                                    "output lines, each body a Decision).")] = "jsonl"
                  ) -> StreamingResponse:
    """Every decision with its answers and diagnostics, streamed as JSON lines from SQL."""
    info = await asyncio.to_thread(_find, api, run)

    def _records(session: Session) -> Iterator[dict[str, Any]]:
        if fmt == "openai-batch":
            return iter_openai_batch(session, info.id, str(info.settings.get("model", "")))
        return iter_export(session, info.id)

    def _lines() -> Iterator[bytes]:
        with session_scope(api.factory) as session:
            for record in _records(session):
                yield orjson.dumps(record, default=str) + b"\n"

    return StreamingResponse(_lines(), media_type="application/x-ndjson",
                             headers={"content-disposition": _disposition(f"{run}.jsonl")})


def _disposition(filename: str) -> str:
    """``content-disposition`` naming ``filename`` in any script: printable ASCII in
    ``filename`` (others as ``_``), the exact name in RFC 5987's ``filename*``."""
    plain = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in filename)
    return f"inline; filename=\"{plain}\"; filename*=UTF-8''{quote(filename, safe='')}"


class ResumeParams(SpendParams):
    """Query parameters of ``POST /v1/runs/{run}/resume``: ``dreads resume``'s options. Read
    settings given must be the run's own (only an endpoint budget may change)."""

    retry_failed: bool = Field(False, description="Put failed decisions back to pending first.")
    dry_run: bool = Field(False, description="Only say what would be done; change nothing.")
    force: bool = Field(False, description="Continue against a server whose model or canvas "
                        "differs from the run's.")


@router.post("/{run}/resume", responses={
    409: {"description": "The run was cancelled, or would continue under other settings or on "
                         "a server that does not serve its model and canvas."}})
async def resume(run: str, api: Api, params: Annotated[ResumeParams, Query()]
                 ) -> dict[str, Any]:
    """Continue a run as ``dreads resume`` does, with the same checks (``app.runs.resume``):
    its settings, its server, then expired leases back to pending and the rest run here or
    re-published to the workers."""
    check_answer_url(params.answer_url, api.config)
    info = await asyncio.to_thread(_find, api, run)
    options = ResumeOptions(retry_failed=params.retry_failed, dry_run=params.dry_run,
                            force=params.force, requeue_after_s=api.config.sweep.requeue_after_s,
                            prices=params.prices())
    try:
        report = await asyncio.to_thread(resume_run, api.factory, info, params.overrides(),
                                         options=options, server=api.server(),
                                         proceed=api.executor.proceed)
    except DreadsError as exc:
        raise_for(exc)
    return {"run": run, "execution": api.executor.resumed(info, report), "links": _links(run)}


@router.post("/{run}/cancel")
async def cancel(run: str, api: Api) -> dict[str, Any]:
    """Cancel a run: no decision of it starts any more (``cancelled``); those in flight
    finish and keep their answers (``in_flight``). A finished or cancelled run is left as it
    is (``changed`` false, ``state`` says which)."""
    def _cancel() -> dict[str, Any]:
        with session_scope(api.factory) as session:
            return cancel_run(session, _required(session, run).id).as_dict()

    return {"run": run, **await asyncio.to_thread(_cancel)}


@router.delete("/{run}", responses={409: {"description": "Decisions are in flight."}})
async def delete(run: str, api: Api, force: Annotated[bool, Query(
        description="Delete even while decisions are in flight.")] = False) -> dict[str, Any]:
    """Delete a run with its decisions, answers, draws and attempts (``dreads delete``)."""
    def _delete() -> dict[str, int]:
        with session_scope(api.factory) as session:
            info = _required(session, run)
            contents = run_contents(session, info.id)
            if contents.in_flight and not force:
                raise api_error(409, "conflict_error",
                                f"{contents.in_flight} decision(s) of run {run!r} are in "
                                "flight; cancel it (POST /v1/runs/{run}/cancel), let them "
                                "finish, then delete (or pass force=true)")
            delete_run(session, info.id)
            return contents.as_dict()

    return {"run": run, "deleted": await asyncio.to_thread(_delete)}
