"""The base install fits beside vLLM 0.33.0: ``pip install dreads`` into vLLM's environment
needs nothing vLLM's own pins exclude (its wheel requires ``transformers<5.21,>=5.16.1``,
``fastapi[standard]<0.137,>=0.133``, ``tokenizers>=0.23.2``, ``aiohttp>=3.14.4``,
``pydantic>=2.12``). The ``engine`` extra needs transformers 5.23+ and does not; the README says
to install it in an environment of its own."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
#: A version of each shared dependency that vLLM 0.33.0 allows (what pip resolves beside it).
VLLM_033 = {"transformers": "5.20.2", "fastapi": "0.136.3", "tokenizers": "0.23.3",
            "aiohttp": "3.14.5", "pydantic": "2.14.4", "numpy": "2.3.5", "httpx": "0.28.1",
            "uvicorn": "0.54.0"}


def _requirements(group: str | None = None) -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] if group is None else project["optional-dependencies"][group]
    return {(r := Requirement(line)).name.lower(): r for line in lines}


def test_the_base_install_admits_what_vllm_033_pins() -> None:
    base = _requirements()
    for name, version in VLLM_033.items():
        assert name in base, name
        assert base[name].specifier.contains(version, prereleases=True), (name, version)


def test_the_engine_extra_needs_a_transformers_vllm_033_excludes() -> None:
    engine = _requirements("engine")
    assert not engine["transformers"].specifier.contains(VLLM_033["transformers"])
