"""The Celery reliability settings derived from ``Settings`` (no broker needed)."""

from __future__ import annotations

import pytest

from app.broker.client import make_client
from app.broker.config import celery_config, time_limits
from app.broker.names import QUEUE, TASK_RUN_CHUNK, queue_for
from app.cli.worker import worker_argv
from app.config import Settings
from app.errors import ConfigError
from workers.celery_app import make_celery
from workers.resources import served_queue


def test_reliability_settings_are_on() -> None:
    conf = celery_config(Settings(broker_url="redis://127.0.0.1:1/3"))
    expected = {
        "task_acks_late": True, "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1, "task_acks_on_failure_or_timeout": True,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "broker_connection_retry_on_startup": True, "broker_connection_max_retries": None,
        "task_ignore_result": True, "result_backend": None,
        "worker_send_task_events": True, "task_send_sent_event": False,
    }
    assert {k: conf[k] for k in expected} == expected
    assert conf["worker_soft_shutdown_timeout"] > 0 and conf["worker_max_tasks_per_child"] > 0
    assert conf["task_routes"][TASK_RUN_CHUNK]["queue"] == QUEUE


def test_time_limits_are_ordered_and_visibility_is_set_everywhere() -> None:
    settings = Settings(task_time_limit_s=600, visibility_timeout_s=1800)
    soft, hard, visibility = time_limits(settings)
    assert soft < hard == 600 < visibility == 1800
    conf = celery_config(settings)
    assert conf["visibility_timeout"] == 1800
    assert conf["broker_transport_options"]["visibility_timeout"] == 1800
    assert conf["result_backend_transport_options"]["visibility_timeout"] == 1800
    assert (conf["task_soft_time_limit"], conf["task_time_limit"]) == (soft, hard)


def test_a_visibility_timeout_below_the_time_limit_is_refused() -> None:
    with pytest.raises(ConfigError, match="DREADS_VISIBILITY_TIMEOUT_S"):
        time_limits(Settings(task_time_limit_s=600, visibility_timeout_s=300))


def test_make_celery_overrides_the_broker() -> None:
    app = make_celery(broker_url="redis://127.0.0.1:1/9")
    assert app.conf.broker_url == "redis://127.0.0.1:1/9"
    assert app.conf.task_acks_late is True


def test_worker_command_line_has_the_dreads_defaults() -> None:
    argv = worker_argv(concurrency=2, pool="prefork", loglevel="INFO", hostname="dreads@%h",
                       extra=["--without-mingle"])
    assert argv[:3] == ["-A", "workers.celery_app", "worker"]
    assert argv[argv.index("-c") + 1] == "2"
    assert "-Q" not in argv, "a worker consumes the queue of what its upstream serves"
    assert argv[-1] == "--without-mingle"


def test_a_run_queue_names_its_model_and_canvas() -> None:
    assert queue_for("dgemma", 320) == "dreads.reads:dgemma@320"
    assert queue_for("org/model-FP8", 256) != queue_for("org/model-FP8", 320)
    assert served_queue(Settings(model="m", canvas=256)) == queue_for("m", 256)


def test_the_send_only_client_knows_no_task_code() -> None:
    client = make_client(Settings(broker_url="redis://127.0.0.1:1/3"),
                         broker_url="redis://127.0.0.1:1/9")
    assert client.conf.broker_url == "redis://127.0.0.1:1/9"
    assert client.conf.task_acks_late is True
    assert not client.conf.include
    client.close()


def test_importing_the_modules_builds_no_celery_app() -> None:
    """A fresh interpreter imports the worker's modules and every publisher: no Celery app
    exists until one is asked for (``get_app``, ``make_client``), and app/ pulls in no
    workers/ module."""
    import subprocess
    import sys

    code = ("import sys, celery._state as st\n"
            "import app.api, app.broker.client, app.broker.publish, app.runs.submit\n"
            "import app.runs.sweep, app.runs.chunk, app.runs.resume, app.runs.embedded\n"
            "assert not [m for m in sys.modules if m.startswith('workers')]\n"
            "import workers.celery_app, workers.resources, workers.tasks\n"
            "assert not list(st._apps), list(st._apps)\n"
            "from workers.celery_app import get_app\n"
            "assert 'reads.run_chunk' in get_app().tasks\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
