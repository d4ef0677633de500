"""Run configuration as a library: the engine registry, settings from flags, the child
environment of ``dreads worker``, the read options declared once."""

from __future__ import annotations

import inspect

import pytest

from app.cli.options import ANSWER_OPTIONS, READ_OPTIONS
from app.cli.resume import resume
from app.cli.run import run
from app.cli.serve import serve
from app.cli.submit import submit
from app.config import Settings, run_env, settings_with, to_environ
from app.connect.engines import ENGINES, EngineKind, engine_spec, is_in_process
from app.errors import ConfigError
from app.runs.read_options import read_overrides
from app.runs.settings import engine_choice, served_identity_update, upstream_url


def test_every_engine_kind_is_registered_and_unknown_names_say_what_to_pass() -> None:
    assert set(ENGINES) == set(EngineKind)
    assert is_in_process("transformers") and not is_in_process("vllm")
    assert not is_in_process(None)
    with pytest.raises(ConfigError, match="--engine vllm or --engine transformers"):
        engine_spec("torch")


def test_the_engine_comes_from_the_flag_then_the_run_then_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREADS_ENGINE", "transformers")
    env = run_env(Settings())
    assert engine_choice(None, engine=None, device=None, dtype=None, env=env).engine \
        == "transformers"
    assert engine_choice("vllm", engine=None, device=None, dtype=None, env=env).engine == "vllm"
    assert engine_choice("vllm", engine="transformers", device="cuda", dtype=None,
                         env=env).device == "cuda"
    with pytest.raises(ConfigError, match="dtype"):
        engine_choice(None, engine=None, device=None, dtype="int3", env=env)


def test_engine_compile_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not engine_choice(None, engine="transformers", device=None, dtype=None,
                             env=run_env(Settings())).compile
    monkeypatch.setenv("DREADS_ENGINE_COMPILE", "1")
    env = run_env(Settings())
    assert engine_choice(None, engine="transformers", device=None, dtype=None, env=env).compile


def test_flags_are_settings_that_count_as_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREADS_CANVAS", "256")
    settings = settings_with(upstream="http://h:1", model=None)
    assert (settings.upstream, settings.canvas, settings.model) == ("http://h:1", 256, "dgemma")
    assert {"upstream", "canvas"} <= settings.model_fields_set
    assert "model" not in settings.model_fields_set
    assert upstream_url(None, "http://recorded:2", env=run_env(settings)) == "http://h:1"
    assert upstream_url(None, "http://recorded:2", env=run_env(Settings())) == "http://recorded:2"


def test_a_child_environment_carries_the_flags_without_writing_ours() -> None:
    env = to_environ({"upstream": "http://h:1", "worker_answers": True, "engine": None,
                      "metrics_port": 9100}, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "DREADS_UPSTREAM": "http://h:1",
                   "DREADS_WORKER_ANSWERS": "1", "DREADS_METRICS_PORT": "9100"}
    with pytest.raises(ValueError, match="not a setting"):
        to_environ({"colour": "red"}, {})


def test_a_worker_with_its_model_set_asks_no_server() -> None:
    settings = Settings(model="m", tokenizer="standin", upstream="http://127.0.0.1:9")
    assert served_identity_update(run_env(settings)) == {}
    in_process = Settings(engine="transformers", upstream="http://127.0.0.1:9")
    assert served_identity_update(run_env(in_process)) == {}


@pytest.mark.parametrize(("command", "answers"), [(run, True), (submit, True), (resume, True),
                                                  (serve, False)])
def test_the_read_options_are_declared_once_and_shared(command: object, answers: bool) -> None:
    params = inspect.signature(command).parameters  # type: ignore[arg-type]
    expected = {**READ_OPTIONS, **(ANSWER_OPTIONS if answers else {})}
    assert {name: params[name].annotation for name in expected} == expected
    assert "given" not in params
    assert set(ANSWER_OPTIONS) & set(params) == (set(ANSWER_OPTIONS) if answers else set())


def test_read_overrides_names_the_settings_fields() -> None:
    assert read_overrides(canvas=256, mode=None, draws=3) == {
        "canvas_length": 256, "fixed_draws": 3, "policy": "fixed"}


def test_app_runs_gets_a_frozen_copy_of_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREADS_UPSTREAM_API_KEY", "k")
    monkeypatch.setenv("DREADS_ANSWER_API_KEY", "")
    env = run_env(settings_with(model="m"))
    assert (env.model, env.upstream_api_key, env.answer_api_key) == ("m", "k", None)
    assert {"model", "upstream_api_key"} <= env.set and "tokenizer" not in env.set
    with pytest.raises(AttributeError):
        env.model = "other"  # type: ignore[misc]
