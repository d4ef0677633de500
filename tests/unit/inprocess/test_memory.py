"""The engine's memory limit (``DREADS_ENGINE_GPU_MEMORY``): the weights' size counted on the
model built on the meta device is what the loaded model holds, weights the limit cannot hold
are refused before loading with the figures, and the room left for the cache and arena stays
under it."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from app.config import get_settings, run_env  # noqa: E402
from app.connect.factory import UpstreamConfig  # noqa: E402
from app.errors import ConfigError  # noqa: E402
from app.inprocess import load_model, make_transformers_upstream  # noqa: E402
from app.inprocess.fp8_load import skeleton  # noqa: E402
from app.inprocess.memory import (  # noqa: E402
    GIB,
    WORKING_MIN,
    model_bytes,
    room,
)
from app.inprocess.quant_format import read_fp8_scheme  # noqa: E402
from app.runs.settings import env_engine  # noqa: E402

pytestmark = pytest.mark.engine


def _held(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters (tied ones once) and persistent buffers."""
    tensors = {id(p): p for p in model.parameters()}
    persistent = {name for name in model.state_dict()}
    tensors.update({id(b): b for name, b in model.named_buffers() if name in persistent})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _planned(path: Path, dtype: torch.dtype) -> int:
    """The size the limit is checked against, from the model built on the meta device."""
    scheme = read_fp8_scheme(str(path))
    return model_bytes(skeleton(str(path), dtype, scheme=scheme))


def test_the_weights_size_is_what_the_loaded_model_holds(tiny_model_dir: Path) -> None:
    for dtype in ("float32", "bfloat16"):
        model = load_model(str(tiny_model_dir), dtype=dtype).model
        assert _planned(tiny_model_dir, getattr(torch, dtype)) == _held(model)


def test_fp8_weights_are_counted_as_loaded(tmp_path: Path) -> None:
    fp8_checkpoint = pytest.importorskip("tests.unit.inprocess.fp8_checkpoint")
    fp8_dir = fp8_checkpoint.make_fp8_dir(tmp_path / "fp8")
    model = load_model(str(fp8_dir), dtype="bfloat16").model
    assert _planned(fp8_dir, torch.bfloat16) == _held(model)
    assert any(p.dtype == torch.float8_e4m3fn for p in model.parameters())


def test_weights_the_limit_cannot_hold_are_refused_with_the_figures(
        tiny_model_dir: Path) -> None:
    size = _planned(tiny_model_dir, torch.float32)
    limit_gib = (size + WORKING_MIN) / GIB
    load_model(str(tiny_model_dir), dtype="float32", memory_gib=limit_gib)  # just fits
    with pytest.raises(ConfigError) as refused:
        load_model(str(tiny_model_dir), dtype="float32", memory_gib=limit_gib - 0.01)
    message = str(refused.value)
    assert f"take {size / GIB:.2f} GiB on the device, leaving" in message
    assert f"memory limit of {limit_gib - 0.01:.2f} GiB" in message
    assert "at least 2 GiB beside them" in message and "DREADS_ENGINE_GPU_MEMORY" in message
    with pytest.raises(ConfigError, match=r"more than the memory limit of 0\.00 GiB"):
        load_model(str(tiny_model_dir), dtype="float32", memory_gib=size / GIB / 2)


def test_the_setting_reaches_the_loader(monkeypatch: pytest.MonkeyPatch,
                                        tiny_model_dir: Path) -> None:
    monkeypatch.setenv("DREADS_ENGINE_GPU_MEMORY", "1.5")
    get_settings.cache_clear()
    config = env_engine(run_env(get_settings()), engine="transformers")
    assert config.gpu_memory == 1.5
    tiny = UpstreamConfig(engine="transformers", model=str(tiny_model_dir),
                          model_path=str(tiny_model_dir), gpu_memory=config.gpu_memory)
    with pytest.raises(ConfigError, match=r"memory limit of 1\.50 GiB"):
        make_transformers_upstream(tiny)


@pytest.mark.parametrize(("free", "reserved", "allocated", "limit", "expected"), [
    (10, 4, 3, None, 11),  # free on the card, plus what the allocator holds unused
    (10, 4, 3, 8, 5),  # no more than the limit minus what is allocated
    (10, 4, 3, 20, 11),  # the card has less than the limit leaves
    (0, 4, 9, 8, 0),  # past the limit: nothing
])
def test_the_room_for_cache_and_arena_stays_under_the_limit(
        free: int, reserved: int, allocated: int, limit: int | None, expected: int) -> None:
    assert room(free, reserved, allocated, limit) == expected


def test_a_lower_batch_reaches_the_engine_with_its_prefill_budget(
        monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path) -> None:
    """``DREADS_ENGINE_MAX_BATCH`` (a small card's setting) bounds the reads of one forward and
    the tokens of one prefill together; the default keeps 64 reads and 16,384 tokens."""
    monkeypatch.setenv("DREADS_ENGINE_MAX_BATCH", "8")
    get_settings.cache_clear()
    try:
        config = env_engine(run_env(get_settings()), engine="transformers")
    finally:
        get_settings.cache_clear()
    assert config.max_batch == 8
    tiny = UpstreamConfig(engine="transformers", model=str(tiny_model_dir),
                          model_path=str(tiny_model_dir), max_batch=config.max_batch)
    upstream = make_transformers_upstream(tiny)
    assert upstream.batcher.max_batch == 8 and upstream.executor.decode_batch == 8
    assert upstream.executor.prefill_token_budget == 4096
    default = make_transformers_upstream(UpstreamConfig(
        engine="transformers", model=str(tiny_model_dir), model_path=str(tiny_model_dir)))
    assert default.executor.prefill_token_budget == 16384 and default.batcher.max_batch == 64
