"""Errors are answers, not 500s: what a hostile or careless client sends ``dreads serve`` on
PostgreSQL gets its 4xx, and a database that is down the promised 503.

Each case is one a user (or a fuzzer) met as a 500 or a dropped connection: a body that is
not UTF-8, ``%00`` in a ``file://`` URL, a run name outside latin-1, CR/LF or NUL in a run
name, JSON nested 1,000 deep, lines no database can store, four clients creating one run at
once, and every runs route while PostgreSQL is stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.fixtures.api import ServeProcess
from tests.fixtures.services import (
    PostgresServer,
    create_pg_database,
)

NDJSON = {"content-type": "application/x-ndjson"}
NOUL = {"type": "noul", "instructions": "Is the clause lawful?"}


def _line(key: str, **changes: Any) -> bytes:
    return orjson.dumps({"id": key, "cell": "c1", "state": f"Clause {key}.",
                         "questions": {"ok": NOUL}, **changes})


@pytest.fixture(scope="module")
def server(module_serve_factory: Callable[..., ServeProcess], cli_pg: str,
           tmp_path_factory: pytest.TempPathFactory) -> ServeProcess:
    images = tmp_path_factory.mktemp("images")
    return module_serve_factory("--upstream", "sim", "--database-url", cli_pg,
                                "--executor", "local", env={"DREADS_IMAGE_DIRS": str(images)})


def submit(server: ServeProcess, run: str, data: bytes) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/runs", params={"run": run}, content=data,
                      headers=NDJSON, timeout=60.0)


def test_a_body_that_is_not_utf8_is_a_422(server: ServeProcess) -> None:
    body = b'{"model": "dgemma", "state": "\xff\xfe", "questions": {"ok": {"type": "noul"}}}'
    response = httpx.post(f"{server.url}/v1/systemone", content=body,
                          headers={"content-type": "application/json"}, timeout=30.0)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["type"] == "json_invalid" and "\ufffd" in error["input"]


def test_nul_in_a_file_url_is_a_400_that_says_so(server: ServeProcess) -> None:
    body = {"model": "dgemma", "state": None, "questions": {"ok": NOUL},
            "images": ["file:///tmp/a%00b.png"]}
    response = httpx.post(f"{server.url}/v1/systemone", json=body, timeout=30.0)
    assert response.status_code == 400, response.text
    assert "holds a NUL character (%00)" in response.json()["detail"]


def test_input_json_nested_1000_deep_is_a_400(server: ServeProcess) -> None:
    deep = "[" * 1000 + "]" * 1000
    body = ('{"model": "dgemma", "questions": [{"type": "predicate", "name": "q", '
            '"instructions": "Lawful?"}], "input": [{"role": "user", "content": '
            f'[{{"type": "input_json", "json": {deep}}}]}}]}}')
    response = httpx.post(f"{server.url}/v1/decisions", content=body,
                          headers={"content-type": "application/json"}, timeout=30.0)
    assert response.status_code == 400, response.text
    assert "nested deeper than 64 levels" in response.json()["error"]["message"]


def test_a_run_name_outside_latin1_is_served_under_its_own_name(server: ServeProcess) -> None:
    name = "€-contrats #2"
    created = submit(server, name, _line("d1"))
    assert created.status_code == 201
    link = created.json()["links"]["results"]
    assert link == "/v1/runs/%E2%82%AC-contrats%20%232/results"
    response = httpx.get(f"{server.url}{link}", timeout=30.0)
    assert response.status_code == 200, response.text
    disposition = response.headers["content-disposition"]
    assert disposition.endswith("filename*=UTF-8''%E2%82%AC-contrats%20%232.jsonl")
    assert 'filename="_-contrats #2.jsonl"' in disposition


@pytest.mark.parametrize(("name", "says"), [
    ("a\r\nINFO forged", "holds a control character"), ("a/b", "holds '/' or '..'"),
    ("..", "holds '/' or '..'"), ("a\u0000b", "holds a NUL character"),
    ("n" * 201, "the limit is 200")])
def test_a_run_name_that_cannot_be_stored_or_addressed_is_a_422(
        server: ServeProcess, name: str, says: str) -> None:
    response = submit(server, name, _line("d1"))
    assert response.status_code == 422, response.text
    assert says in response.json()["detail"][0]["msg"]


def test_a_run_name_with_nul_names_no_run(server: ServeProcess) -> None:
    for path in ("a%00b", "a%00b/results"):
        response = httpx.get(f"{server.url}/v1/runs/{path}", timeout=10.0)
        assert response.status_code == 404, response.text


def test_lines_no_database_stores_are_bad_lines_and_the_rest_is_stored(
        server: ServeProcess) -> None:
    good = [_line(f"g{i}") for i in range(6)]
    bad = [_line("b\u0000"), _line("b1", cell="c" * 201), _line("i" * 501),
           _line("b2", state="a\u0000"),
           _line("b3", questions={"q" * 501: NOUL})]
    response = submit(server, "unstorable", b"\n".join(good[:3] + bad + good[3:]) + b"\n")
    assert response.status_code == 201, response.text
    report = response.json()
    assert report["inserted"] == 6
    assert [b["line"] for b in report["bad_lines"]] == [4, 5, 6, 7, 8]
    assert all("the limit is" in b["reason"] or "NUL character" in b["reason"]
               for b in report["bad_lines"])


def test_four_clients_creating_one_run_get_one_201_and_200s(server: ServeProcess) -> None:
    data = b"\n".join(_line(f"r{i}") for i in range(20)) + b"\n"
    with ThreadPoolExecutor(max_workers=4) as pool:
        codes = sorted(pool.map(lambda _: submit(server, "raced", data).status_code, range(4)))
    assert codes[0] in (200, 409) and codes.count(201) == 1, codes
    assert set(codes) <= {200, 201, 409}, codes


# -- PostgreSQL stopped: 503 on every runs route ----------------------------------------------
@pytest.fixture
def stopped_pg_server(serve_factory: Callable[..., ServeProcess], private_pg: PostgresServer
                      ) -> Iterator[ServeProcess]:
    url = create_pg_database(private_pg.base_url, "down")
    served = serve_factory("--upstream", "sim", "--database-url", url, "--executor", "local")
    assert submit(served, "there", _line("d1")).status_code == 201
    private_pg.stop("immediate")
    yield served


RUNS_ROUTES = [("GET", "/v1/runs"), ("GET", "/v1/runs/there"),
               ("GET", "/v1/runs/there/results"), ("POST", "/v1/runs?run=there"),
               ("POST", "/v1/runs/there/resume"), ("POST", "/v1/runs/there/cancel"),
               ("DELETE", "/v1/runs/there")]


def test_every_runs_route_is_a_503_while_postgresql_is_down(
        stopped_pg_server: ServeProcess, tmp_path: Path) -> None:
    for method, path in RUNS_ROUTES:
        response = httpx.request(method, f"{stopped_pg_server.url}{path}",
                                 content=_line("d2") if method == "POST" else None,
                                 headers=NDJSON, timeout=30.0)
        assert response.status_code == 503, (method, path, response.text)
        assert response.headers["retry-after"]
        assert "the database is unavailable" in response.json()["detail"]["message"]
