"""FP8 checkpoints (compressed-tensors ``float-quantized``, as llm-compressor writes them): the
loader puts every weight where transformers' model has it, the engine's answers match the same
model dequantized to bf16, the FP8 products equal the dequantized ones, and formats the engine
cannot read are refused with their name."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file, save_file  # noqa: E402

from app.engine import (  # noqa: E402
    DecisionFlow,
    PolicyName,
    ReadSettings,
    parse_decision,
    plan_decision,
)
from app.errors import ConfigError  # noqa: E402
from app.inprocess import ReadModel, TransformersUpstream, load_model  # noqa: E402
from app.inprocess.fp8 import (  # noqa: E402
    FP8_EXPERTS,
    Fp8Linear,
    Fp8Mode,
    fp8_products,
    quantize_model,
    quantize_rows,
    set_fp8_mode,
)
from app.inprocess.tiny import build_tiny_model, rounded_vocab  # noqa: E402
from app.tokenizer.hf import HFTextTokenizer  # noqa: E402
from tests.fixtures.runs_cli import CliResult, sqlite_rows  # noqa: E402
from tests.unit.inprocess.fp8_checkpoint import (  # noqa: E402
    dequantized_dir,
    make_fp8_dir,
    nvfp4_quantization_config,
)

pytestmark = pytest.mark.engine

SMALL = Path(__file__).resolve().parents[3] / "examples" / "small.jsonl"
#: |d log-prob| of a label, FP8 (per-token FP8 inputs) against the weights dequantized to bf16
#: and read unquantized (max, mean). Measured 0.147, 0.040 (2026-12-04). This random model
#: amplifies any rounding: its routers' top-k gaps are tiny, so a perturbation flips experts.
#: Rounding the same weights to bf16 alone, inputs unquantized, moves them by 0.208, 0.010.
LABEL_TOLERANCE = (0.3, 0.06)
STATE = ("Clause 1.1: Neither party hires the other's staff during the agreement and for 18 "
         "months after it. Clause 2.2: Northwind tells Acme about any data breach within 168 "
         "hours of finding it.")
QUESTIONS = {
    "conflict": {"type": "noul", "instructions": "Do these two clauses contradict each other?"},
    "severity": {"type": "score", "instructions": "How severe is a breach of clause 2.2?",
                 "criteria": ["minor", "serious", "critical"]},
}


@pytest.fixture(scope="module")
def fp8_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fp8_dir(tmp_path_factory.mktemp("fp8-dgemma"))


@pytest.fixture(scope="module")
def bf16_dir(fp8_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dequantized_dir(fp8_dir, tmp_path_factory.mktemp("dequantized-dgemma"))


@pytest.fixture(scope="module")
def float32_dir(fp8_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dequantized_dir(fp8_dir, tmp_path_factory.mktemp("float32-dgemma"), torch.float32)


@pytest.fixture(scope="module")
def fp8_model(fp8_dir: Path) -> ReadModel:
    return load_model(str(fp8_dir), dtype="float32")


def _label_logprobs(model: ReadModel, tokenizer: HFTextTokenizer, n: int = 3) -> list[float]:
    """Every read's label log-probs for ``n`` decisions, 2 draws each, through the engine."""
    settings = ReadSettings(model="tiny", tokenizer=tokenizer.name, canvas_length=320,
                            policy=PolicyName.FIXED, fixed_draws=2)
    upstream = TransformersUpstream.from_model(model, tokenizer=tokenizer, name="tiny",
                                               flush_ms=1.0)

    async def read(line: dict[str, Any]) -> list[float]:
        plan = plan_decision(parse_decision(line, line_no=1), settings, tokenizer)
        flow = DecisionFlow(plan, settings, vocab_size=model.vocab_size, replicate=0)
        rows: list[float] = []
        while not flow.done:
            requests = flow.next_requests()
            results = await asyncio.gather(*(upstream.read(r) for r in requests))
            for request, result in zip(requests, results, strict=True):
                flow.record(request, result)
                rows += [p for row in result.rows.values() for p in row.logprobs.values()]
        return rows

    async def main() -> list[float]:
        try:
            done = await asyncio.gather(*(read({"id": f"d{i}", "state": f"{STATE} ({i})",
                                                "questions": QUESTIONS}) for i in range(n)))
        finally:
            await upstream.aclose()
        return [row for rows in done for row in rows]

    return asyncio.run(main())


def test_every_weight_is_compressed_tensors_dequantization(fp8_model: ReadModel,
                                                           float32_dir: Path) -> None:
    """Each FP8 layer's weight times its scales is, exactly, what compressed-tensors'
    decompressor makes of the checkpoint (experts packed back to transformers' layout)."""
    reference = load_model(str(float32_dir), dtype="float32").model.state_dict()
    model = fp8_model.model
    linears = {n: m for n, m in model.named_modules() if isinstance(m, Fp8Linear)}
    assert len(linears) > 20 and fp8_model.config._experts_implementation == FP8_EXPERTS
    for name, linear in linears.items():
        weight = linear.weight.float() * linear.weight_scale
        assert torch.equal(weight, reference[f"{name}.weight"]), name
    experts = [(n, m) for n, m in model.named_modules() if hasattr(m, "fp8_dynamic")]
    assert len(experts) == 6  # 3 encoder + 3 decoder layers
    for name, module in experts:
        for proj in ("gate_up_proj", "down_proj"):
            weight = getattr(module, proj).float() * getattr(module, f"{proj}_scale")[..., None]
            assert torch.equal(weight, reference[f"{name}.{proj}"]), name
    for name in ("lm_head.weight", "model.decoder.layers.0.router.proj.weight"):
        assert torch.equal(model.state_dict()[name], reference[name])
    # the image encoder's tensors are in the checkpoint, but text reads never run it
    assert model.model.encoder.vision_tower is None and model.model.encoder.embed_vision is None


def test_per_tensor_weight_scales_are_read_for_every_channel(tmp_path: Path) -> None:
    fp8_dir = make_fp8_dir(tmp_path / "fp8", weight_strategy="tensor")
    quant = json.loads((fp8_dir / "config.json").read_text())["quantization_config"]
    assert quant["config_groups"]["group_0"]["weights"]["strategy"] == "tensor"
    reference = load_model(str(dequantized_dir(fp8_dir, tmp_path / "f32", torch.float32)),
                           dtype="float32").model.state_dict()
    model = load_model(str(fp8_dir), dtype="float32").model
    layer = model.model.decoder.layers[1].self_attn.q_proj
    assert layer.weight_scale.unique().numel() == 1
    name = "model.decoder.layers.1.self_attn.q_proj.weight"
    assert torch.equal(layer.weight.float() * layer.weight_scale, reference[name])
    experts = model.model.decoder.layers[1].experts
    assert experts.gate_up_proj_scale[2, :32].unique().numel() == 1  # gate_proj's one scale
    assert torch.equal(experts.gate_up_proj.float() * experts.gate_up_proj_scale[..., None],
                       reference["model.decoder.layers.1.experts.gate_up_proj"])


def test_the_encoder_and_decoder_share_their_fp8_weights(fp8_model: ReadModel) -> None:
    """transformers' DiffusionGemma shares every layer weight between encoder and decoder;
    quantization untied them on disk (two copies), the loader keeps one in memory."""
    encoder = fp8_model.model.model.encoder.language_model.layers
    decoder = fp8_model.model.model.decoder.layers
    for enc, dec in zip(encoder, decoder, strict=True):
        assert enc.self_attn.q_proj.weight is dec.self_attn.q_proj.weight
        assert enc.mlp.down_proj.weight_scale is dec.mlp.down_proj.weight_scale
        assert enc.experts.gate_up_proj is dec.experts.gate_up_proj
        assert enc.experts.down_proj_scale is dec.experts.down_proj_scale


def test_a_model_in_memory_is_quantized_as_llm_compressor_does(fp8_model: ReadModel) -> None:
    """``quantize_model`` (the benchmark's FP8 model): the layers llm-compressor's recipe
    quantizes, each weight within e4m3's rounding of its original, shared weights shared."""
    model = build_tiny_model(rounded_vocab(fp8_model.vocab_size), layers=3, seed=3)
    original = {n: p.detach().clone()
                for n, p in model.named_parameters(remove_duplicate=False)}
    quantize_model(model)
    names = {n for n, m in model.named_modules() if isinstance(m, Fp8Linear)}
    assert names == {n for n, m in fp8_model.model.named_modules() if isinstance(m, Fp8Linear)}
    quantized = {**{f"{n}.weight": (m.weight, m.weight_scale) for n, m in
                    model.named_modules() if isinstance(m, Fp8Linear)},
                 **{f"{n}.{p}": (getattr(m, p), getattr(m, f"{p}_scale")[..., None])
                    for n, m in model.named_modules() if hasattr(m, "fp8_dynamic")
                    for p in ("gate_up_proj", "down_proj")}}
    assert len(quantized) > 30  # each shared weight once
    for name, (weight, scale) in quantized.items():
        want = original[name]
        error = (weight.float() * scale - want).abs()
        assert (error <= want.abs() / 16 + scale * 2.0**-10 + 1e-12).all(), name
    encoder, decoder = model.model.encoder.language_model.layers, model.model.decoder.layers
    assert encoder[0].experts.gate_up_proj is decoder[0].experts.gate_up_proj
    assert encoder[2].self_attn.o_proj is decoder[2].self_attn.o_proj


def test_one_saved_copy_of_the_shared_weights_is_enough(
        fp8_model: ReadModel, fp8_dir: Path, tmp_path: Path,
        standin_tokenizer: HFTextTokenizer) -> None:
    """A checkpoint that keeps the tie (the decoder's copy only) loads the same model."""
    tensors = load_file(str(fp8_dir / "model.safetensors"))
    encoder = "model.encoder.language_model.layers."
    kept = {name: t for name, t in tensors.items()
            if not (name.startswith(encoder) and name.replace(encoder, "model.decoder.layers.")
                    in tensors)}
    assert len(kept) < len(tensors) - 50
    save_file(kept, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(fp8_dir / "config.json", tmp_path / "config.json")
    model = load_model(str(tmp_path), dtype="float32")
    layers = model.model.model.encoder.language_model.layers, model.model.model.decoder.layers
    assert layers[0][1].self_attn.v_proj is layers[1][1].self_attn.v_proj
    assert layers[0][1].experts.down_proj is layers[1][1].experts.down_proj
    torch.testing.assert_close(torch.tensor(_label_logprobs(model, standin_tokenizer, n=1)),
                               torch.tensor(_label_logprobs(fp8_model, standin_tokenizer, n=1)),
                               rtol=0, atol=0)


def test_copies_of_a_shared_weight_that_differ_are_refused(fp8_dir: Path,
                                                           tmp_path: Path) -> None:
    tensors = load_file(str(fp8_dir / "model.safetensors"))
    name = "model.encoder.language_model.layers.1.experts.2.up_proj.weight_scale"
    tensors[name] = tensors[name] * 2
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(fp8_dir / "config.json", tmp_path / "config.json")
    with pytest.raises(ConfigError, match="differs from the other copy"):
        load_model(str(tmp_path), dtype="float32")


def _inputs_quantized(model: ReadModel, on: bool) -> None:
    for module in model.model.modules():
        if isinstance(module, Fp8Linear):
            module.dynamic = on
        elif hasattr(module, "fp8_dynamic"):
            module.fp8_dynamic = on


def test_with_inputs_unquantized_it_is_the_dequantized_model(
        fp8_model: ReadModel, float32_dir: Path, standin_tokenizer: HFTextTokenizer) -> None:
    """The loader and the FP8 experts, apart from the inputs' quantization: the same answers as
    the float32 dequantized checkpoint read by transformers' own layers."""
    _inputs_quantized(fp8_model, False)
    try:
        fp8 = torch.tensor(_label_logprobs(fp8_model, standin_tokenizer))
    finally:
        _inputs_quantized(fp8_model, True)
    plain = torch.tensor(_label_logprobs(load_model(str(float32_dir), dtype="float32"),
                                         standin_tokenizer))
    torch.testing.assert_close(fp8, plain, rtol=0, atol=1e-5)


def test_answers_match_the_model_dequantized_to_bf16(
        fp8_model: ReadModel, bf16_dir: Path, standin_tokenizer: HFTextTokenizer) -> None:
    fp8 = torch.tensor(_label_logprobs(fp8_model, standin_tokenizer))
    plain = torch.tensor(_label_logprobs(load_model(str(bf16_dir), dtype="float32"),
                                         standin_tokenizer))
    assert fp8.shape == plain.shape and fp8.shape[0] >= 24
    gap = (fp8 - plain).abs()
    assert 0 < gap.max().item() <= LABEL_TOLERANCE[0]  # quantized inputs: close, not the same
    assert gap.mean().item() <= LABEL_TOLERANCE[1]


def test_fp8_experts_quantize_each_token_and_expert_row(fp8_model: ReadModel) -> None:
    """The grouped FP8 experts against a plain loop over (token, expert) pairs, each input row
    quantized on its own before each product."""
    experts = fp8_model.model.model.decoder.layers[0].experts
    torch.manual_seed(1)
    hidden = torch.randn(7, experts.hidden_dim)
    top_k_index = torch.stack([torch.randperm(experts.num_experts)[:2] for _ in range(7)])
    top_k_weights = torch.rand(7, 2)

    def product(x: torch.Tensor, name: str, e: int) -> torch.Tensor:
        q, scale = quantize_rows(x[None])
        weight = getattr(experts, name)[e].float() * getattr(experts, f"{name}_scale")[e, :, None]
        return ((q.float() * scale) @ weight.t())[0]

    want = torch.zeros_like(hidden)
    for t in range(7):
        for k in range(2):
            e = int(top_k_index[t, k])
            gated = experts._apply_gate(product(hidden[t], "gate_up_proj", e)[None])[0]
            want[t] += product(gated * top_k_weights[t, k], "down_proj", e)
    got = experts(hidden, top_k_index, top_k_weights)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fp8_products_give_the_dequantized_products_answers(
        fp8_model: ReadModel, standin_tokenizer: HFTextTokenizer) -> None:
    """``scaled_mm`` (the GPU path's call, which torch also runs on the CPU) against the
    dequantized product, through the whole engine: the same function in float32."""
    dequantized = torch.tensor(_label_logprobs(fp8_model, standin_tokenizer, n=2))
    set_fp8_mode(fp8_model.model, Fp8Mode(dense=True))
    try:
        assert all(m.use_fp8 for m in fp8_model.model.modules() if isinstance(m, Fp8Linear))
        scaled = torch.tensor(_label_logprobs(fp8_model, standin_tokenizer, n=2))
    finally:
        set_fp8_mode(fp8_model.model, Fp8Mode())
    torch.testing.assert_close(scaled, dequantized, rtol=0, atol=1e-5)


def test_fixed_layout_steps_read_the_fp8_model_as_the_packed_path(
        fp8_model: ReadModel, standin_tokenizer: HFTextTokenizer) -> None:
    """The decoder steps a GPU replays from CUDA graphs (run eagerly here) over FP8 layers."""
    packed = torch.tensor(_label_logprobs(fp8_model, standin_tokenizer, n=2))
    fp8_model.graphs, fp8_model._steps = True, None
    try:
        stepped = torch.tensor(_label_logprobs(fp8_model, standin_tokenizer, n=2))
        assert fp8_model.steps.steps and fp8_model.steps.fallbacks == 0
    finally:
        fp8_model.graphs, fp8_model._steps = False, None
    torch.testing.assert_close(stepped, packed, rtol=0, atol=1e-5)


def test_fp8_linear_quantizes_each_input_row() -> None:
    torch.manual_seed(0)
    layer = Fp8Linear(32, 16)
    weight = torch.randn(16, 32)
    layer.weight.data, layer.weight_scale.data = quantize_rows(weight)
    x = torch.randn(2, 5, 32) * torch.logspace(-3, 3, 5)[None, :, None]  # rows of every size
    q, scale = quantize_rows(x.reshape(-1, 32))
    assert q.dtype == torch.float8_e4m3fn and q.float().abs().amax(dim=1).eq(448).all()
    want = (q.float() * scale) @ (layer.weight.float() * layer.weight_scale).t()
    for fp8 in (False, True):
        layer.use_fp8 = fp8
        torch.testing.assert_close(layer(x), want.reshape(2, 5, 16), rtol=1e-5, atol=1e-5)


def test_the_fingerprint_names_fast_accumulation_and_the_fused_quantization() -> None:
    assert Fp8Mode(dense=True, experts=True, fast=True, fused=True).describe(
        torch.bfloat16) == ("dense scaled_mm, experts scaled_grouped_mm, fast accumulation, "
                            "inputs quantized by one compiled kernel")
    assert Fp8Mode(dense=True, experts=True).describe(torch.bfloat16) == (
        "dense scaled_mm, experts scaled_grouped_mm")
    assert Fp8Mode().describe(torch.bfloat16) == (
        "dense dequantized to bfloat16, experts dequantized to bfloat16")


def test_no_fp8_products_on_the_cpu() -> None:
    assert fp8_products(torch.device("cpu")) == Fp8Mode()
    assert fp8_products(torch.device("cpu"), torch.float32) == Fp8Mode()


def test_the_fingerprint_names_the_weights_and_their_products(
        fp8_model: ReadModel, standin_tokenizer: HFTextTokenizer) -> None:
    upstream = TransformersUpstream.from_model(fp8_model, tokenizer=standin_tokenizer,
                                               name="tiny-fp8")
    version = asyncio.run(upstream.fingerprint()).version or ""
    asyncio.run(upstream.aclose())
    assert "weights fp8 compressed-tensors float-quantized" in version
    assert "dynamic per-token FP8 inputs" in version
    assert "dense dequantized to float32, experts dequantized to float32" in version


def _with_quantization(tmp_path: Path, fp8_dir: Path, quantization: dict[str, Any]) -> str:
    """The tiny checkpoint's config (and tokenizer) with another ``quantization_config``."""
    for file in fp8_dir.iterdir():
        if file.suffix != ".safetensors":
            shutil.copy(file, tmp_path / file.name)
    config = json.loads((fp8_dir / "config.json").read_text())
    config["quantization_config"] = quantization
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.mark.parametrize(("change", "named"), [
    ({"quant_method": "gptq"}, "'gptq' (quant_method)"),
    ({"quant_method": "modelopt"}, "'modelopt' (quant_method)"),  # nvidia's NVFP4 build
    ({"format": "pack-quantized", "group": {"format": "pack-quantized",
                                             "weights": {"num_bits": 4, "type": "int"}}},
     "'pack-quantized' (4-bit int weights)"),
    ({"group": {"weights": {"num_bits": 8, "type": "float", "strategy": "block"}}},
     "block weight scales"),
    ({"group": {"input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor",
                                      "dynamic": False}}}, "tensor static input scales"),
])
def test_other_quantizations_are_refused_by_name(tmp_path: Path, fp8_dir: Path,
                                                 change: dict[str, Any], named: str) -> None:
    quantization = json.loads((fp8_dir / "config.json").read_text())["quantization_config"]
    group = quantization["config_groups"]["group_0"]
    for key, value in change.pop("group", {}).items():
        group[key] = {**group[key], **value} if isinstance(value, dict) else value
    quantization.update(change)
    with pytest.raises(ConfigError, match=r"cannot read") as refused:
        load_model(_with_quantization(tmp_path, fp8_dir, quantization))
    assert named in str(refused.value) and "FP8-dynamic" in str(refused.value)


def test_an_nvfp4_checkpoint_is_refused_with_what_to_use(tmp_path: Path, fp8_dir: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_model(_with_quantization(tmp_path, fp8_dir, nvfp4_quantization_config()))
    message = str(refused.value)
    assert "'nvfp4-pack-quantized' (4-bit float weights)" in message
    assert "RedHatAI/diffusiongemma-26B-A4B-it-FP8-dynamic" in message and "vLLM" in message


def test_dreads_run_refuses_an_nvfp4_checkpoint_in_one_line(
        dreads: Callable[..., CliResult], fp8_dir: Path, tmp_path: Path) -> None:
    model = _with_quantization(tmp_path, fp8_dir, nvfp4_quantization_config())
    result = dreads("run", str(SMALL), "--engine", "transformers", "--model", model,
                    "--db", str(tmp_path / "d.db"))
    assert result.code != 0 and "Traceback" not in result.stderr
    assert "'nvfp4-pack-quantized' (4-bit float weights)" in result.stderr


def test_dreads_run_reads_small_jsonl_with_the_fp8_checkpoint(
        dreads: Callable[..., CliResult], fp8_dir: Path, tmp_path: Path) -> None:
    """``dreads run examples/small.jsonl --engine transformers --model DIR`` on the CPU."""
    db = tmp_path / "d.db"
    result = dreads("run", str(SMALL), "--engine", "transformers", "--model", str(fp8_dir),
                    "--db", str(db))
    assert result.code == 0, result.stderr
    n_lines = sum(1 for line in SMALL.read_text().splitlines() if line.strip())
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", n_lines)]
    assert sqlite_rows(db, "SELECT sum(n_questions) FROM decisions") == sqlite_rows(
        db, "SELECT count(*) FROM answers")
    fingerprint = json.loads(sqlite_rows(db, "SELECT fingerprint FROM runs")[0][0])
    assert "weights fp8 compressed-tensors" in fingerprint["version"]
