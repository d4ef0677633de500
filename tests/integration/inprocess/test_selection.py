"""Choosing the engine: ``make_upstream`` with engine "transformers", ``dreads engine
make-tiny``, and the messages a wrong choice gets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

from app.cli import app
from app.cli.engine import engine_config
from app.connect.factory import UpstreamConfig, make_upstream
from app.engine import DecisionFlow, ReadSettings, parse_decision, plan_decision
from app.errors import ConfigError
from app.tokenizer.hf import load_tokenizer

pytestmark = pytest.mark.engine

LINE = {"id": "d", "state": "Clause 1: pay in 30 days.",
        "questions": {"late": {"type": "noul", "instructions": "Is 45 days late?"}}}


def test_make_upstream_builds_the_transformers_engine(tiny_model_dir: Path) -> None:
    path = str(tiny_model_dir)
    config = UpstreamConfig(engine="transformers", model=path, dtype="float32")
    upstream = make_upstream(config)
    tokenizer = load_tokenizer(path)
    settings = ReadSettings(model=path)
    plan = plan_decision(parse_decision(LINE, line_no=1), settings, tokenizer)
    request = DecisionFlow(plan, settings, vocab_size=tokenizer.info.vocab_size
                           ).next_requests()[0]

    async def main() -> tuple[str, int]:
        result = await upstream.read(request)
        fingerprint = await upstream.fingerprint()
        await upstream.aclose()
        return fingerprint.engine, len(result.rows)

    assert asyncio.run(main()) == ("transformers", 1)
    assert upstream.engine == "transformers"


def test_make_tiny_writes_a_loadable_model_dir(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    result = CliRunner().invoke(app, ["engine", "make-tiny", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "config.json").exists()
    assert (out / "model.safetensors").exists()
    assert (out / "tokenizer.json").exists()
    assert "dreads sim --engine transformers" in result.output


def test_a_wrong_engine_or_model_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--engine transformers"):
        engine_config(UpstreamConfig(), engine="torch", device=None, dtype=None)
    with pytest.raises(ConfigError, match="make-tiny"):
        make_upstream(UpstreamConfig(engine="transformers", model=str(tmp_path)))
