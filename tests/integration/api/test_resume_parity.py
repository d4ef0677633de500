"""Resume over HTTP refuses exactly what ``dreads resume`` refuses, with the same message.

Both call ``app.runs.resume.resume_run``: a changed setting, a cancelled run and a server that
does not serve the run's model are refused the same way (the CLI prints the message and exits
non-zero; ``POST /v1/runs/{run}/resume`` answers 409 with it), and nothing is changed.
PostgreSQL, a private Redis, simulators over real HTTP and a real ``dreads serve``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.sim import SimHandle, SimOptions, start_sim_thread
from tests.fixtures.api import StartServe
from tests.fixtures.runs_cli import CliResult, job_line, run_counts, write_jobs
from tests.fixtures.services import RedisServer, free_port

Dreads = Callable[..., CliResult]


@pytest.fixture(scope="module")
def served() -> Iterator[SimHandle]:
    with start_sim_thread(SimOptions()) as handle:  # serves dgemma, the runs' model
        yield handle


def _open_run(dreads: Dreads, db: str, served: SimHandle, tmp_path: Path, name: str) -> str:
    """A run with work left: submitted while the broker was down (its decisions pending)."""
    path = write_jobs(tmp_path / f"{name}.jsonl", [job_line(f"{name}{i}") for i in range(3)])
    result = dreads("submit", str(path), "--run", name, "--database-url", db, "--broker",
                    f"redis://127.0.0.1:{free_port()}/0", "--upstream", served.url)
    assert result.code == 0, result.stderr
    assert run_counts(db, name) == {"pending": 3}
    return name


def _both(dreads: Dreads, serve: StartServe, db: str, redis: RedisServer, upstream: str,
          run: str, cli: tuple[str, ...], query: dict[str, str]) -> tuple[CliResult, str]:
    """The CLI's refusal and the API's message, for the same resume of ``run``."""
    refused = dreads("resume", run, "--database-url", db, "--broker", redis.url,
                     "--upstream", upstream, *cli)
    server = serve("--database-url", db, "--broker", redis.url, "--upstream", upstream)
    answer = httpx.post(f"{server.url}/v1/runs/{run}/resume", params=query, timeout=60.0)
    assert answer.status_code == 409, answer.text
    server.stop()
    return refused, str(answer.json()["detail"]["message"])


def test_a_changed_setting_is_refused_the_same_way(
        dreads: Dreads, serve_factory: StartServe, cli_pg: str, cli_redis: RedisServer,
        served: SimHandle, tmp_path: Path) -> None:
    run = _open_run(dreads, cli_pg, served, tmp_path, "ps")
    cli, api = _both(dreads, serve_factory, cli_pg, cli_redis, served.url, run,
                     ("--threshold", "0.3"), {"threshold": "0.3"})
    assert cli.code != 0
    # the same message, each naming the setting as its user gave it
    assert f"run {run!r} was created with other settings (threshold: 0.1 -> 0.3); " in api
    assert api.replace("(threshold: ", "(--threshold ") in cli.stderr
    assert run_counts(cli_pg, run) == {"pending": 3}


def test_a_cancelled_run_is_refused_the_same_way(
        dreads: Dreads, serve_factory: StartServe, cli_pg: str, cli_redis: RedisServer,
        served: SimHandle, tmp_path: Path) -> None:
    run = _open_run(dreads, cli_pg, served, tmp_path, "pc")
    assert dreads("cancel", run, "--database-url", cli_pg).code == 0
    cli, api = _both(dreads, serve_factory, cli_pg, cli_redis, served.url, run, (), {})
    assert cli.code == 2
    assert "was cancelled" in api and api in cli.stderr


def test_a_server_of_another_model_is_refused_the_same_way(
        dreads: Dreads, serve_factory: StartServe, cli_pg: str, cli_redis: RedisServer,
        served: SimHandle, tmp_path: Path) -> None:
    run = _open_run(dreads, cli_pg, served, tmp_path, "pm")
    with start_sim_thread(SimOptions(model="other")) as other:
        cli, api = _both(dreads, serve_factory, cli_pg, cli_redis, other.url, run, (), {})
        assert cli.code != 0
        assert "started against model 'dgemma'" in api and api in cli.stderr
        assert "serves other" in api
        cli_redis.wipe()
        forced = dreads("resume", run, "--database-url", cli_pg, "--broker", cli_redis.url,
                        "--upstream", other.url, "--force", "--json")
        assert forced.code == 0, forced.stderr
        assert forced.json()["sweep"]["published"] == 3


def test_a_submit_to_a_cancelled_run_is_refused_as_resume_refuses_it(
        dreads: Dreads, serve_factory: StartServe, cli_pg: str, cli_redis: RedisServer,
        served: SimHandle, tmp_path: Path) -> None:
    """``POST /v1/runs`` to a cancelled run: 409 with the words of ``dreads submit`` and
    ``dreads resume``; nothing stored."""
    run = _open_run(dreads, cli_pg, served, tmp_path, "sc")
    assert dreads("cancel", run, "--database-url", cli_pg).code == 0
    more = write_jobs(tmp_path / "more.jsonl", [job_line(f"more{i}") for i in range(2)])
    cli = dreads("submit", str(more), "--run", run, "--database-url", cli_pg, "--broker",
                 cli_redis.url, "--upstream", served.url)
    server = serve_factory("--database-url", cli_pg, "--broker", cli_redis.url,
                           "--upstream", served.url)
    answer = httpx.post(f"{server.url}/v1/runs", params={"run": run},
                        content=more.read_bytes(),
                        headers={"content-type": "application/x-ndjson"}, timeout=60.0)
    server.stop()
    assert answer.status_code == 409, answer.text
    message = str(answer.json()["detail"]["message"])
    assert message == f"run {run!r} was cancelled; submit its file under a new run name to run " \
        "it again"
    assert cli.code == 2 and message in cli.stderr
    assert run_counts(cli_pg, run) == {"cancelled": 3}


def test_a_settings_mismatch_over_the_api_names_its_parameters(
        dreads: Dreads, serve_factory: StartServe, cli_pg: str, cli_redis: RedisServer,
        served: SimHandle, tmp_path: Path) -> None:
    run = _open_run(dreads, cli_pg, served, tmp_path, "sm")
    server = serve_factory("--database-url", cli_pg, "--broker", cli_redis.url,
                           "--upstream", served.url)
    answer = httpx.post(f"{server.url}/v1/runs", params={"run": run, "mode": "joint"},
                        content=(tmp_path / "sm.jsonl").read_bytes(),
                        headers={"content-type": "application/x-ndjson"}, timeout=60.0)
    server.stop()
    assert answer.status_code == 409, answer.text
    assert "exists with other settings (mode: isolated -> joint)" in \
        answer.json()["detail"]["message"]
