"""Throughput of the in-process transformers engine on the product's own path, next to a bare
forward-pass ceiling on the same batch shapes.

The model is the full-size DiffusionGemma architecture (the released text config) with random
bf16 weights built straight on the GPU (same cost as the real checkpoint), or a tiny config for a
CPU smoke run. Decisions are planned by dreads' own planner (``plan_decision``, the ``vllm``
layout, chat prompts rendered by the tokenizer) and driven by its own loop
(``app.runs.answer.drive``) through ``TransformersUpstream.read``, scheduled as ``execute_run``
schedules them: ``--workers`` chunks of ``--chunk`` decisions at once, each chunk's reads under
a ``--in-flight`` semaphore, a decision's draws back to back (one round per draw), so each
prompt is prefilled once. Only the store is left out.

Scenarios (``--scenarios``, comma-separated ``NAME:DRAWS``):

* ``field``: the field report's shape, one yes/no question per state (``examples/contracts.jsonl``
  states, each lengthened with other clauses to a prompt of 150-800 tokens), ``--states`` states;
* ``iso6`` / ``joint6``: ``--multi-states`` states of 6 yes/no questions each, read one question per
  canvas (isolated) or all six in one canvas (joint).

Every figure comes with its bare ceiling: each encoder and decoder call the engine made is
replayed as a bare transformers forward of the same batch shape (encoder on uniform rows with no
mask and no cache bookkeeping; decoder over one prompt's cache expanded to the batch, no mask,
same slots), so the table says how much of the wall time is model time, how much the cache and
batching cost, and how much is left outside the forwards.

``--weights fp8`` quantizes the random weights on the device as llm-compressor's ``FP8_DYNAMIC``
recipe does (``fp8.quantize_model``) and reads with the FP8 products the device has
(``--fp8-torch-defaults``: without fast accumulation, inputs quantized in eager torch);
``--compare-fp8 N`` reads N field decisions in bf16, then quantized (FP8 products, then
dequantized ones), and prints mean/max |dP(yes)| and each run's AUC. ``--gpu-memory GiB``
caps the process as ``DREADS_ENGINE_GPU_MEMORY`` does (refusing weights the cap cannot hold,
with the figures); the table's GiB column is each run's peak memory allocated (use
``--no-bare`` under a cap: the bare right-padded forwards are not the engine's).

``--prefill-sweep 1,4,16,64`` times the encoder alone on that many field prompts, until its
launches return and until the GPU is done (equal: the host is the limit);
``--attention-per-prompt`` runs the prefill's attention a call per prompt instead of one call
a layer; ``--profile FILE:DRAWS:SCENARIO`` writes a torch profile of one scenario's run.

    python bench/transformers_reads.py --config full --device cuda      # H200
    python bench/transformers_reads.py --config full --device cuda --weights fp8 --gpu-memory 32
    python bench/transformers_reads.py --config small --device cpu --states 24 --multi-states 4
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, DynamicCache

from app.engine import (
    Decision,
    DecisionFlow,
    PolicyName,
    ReadMode,
    ReadRequest,
    ReadResult,
    ReadSettings,
    parse_decision,
    plan_decision,
)
from app.errors import ConfigError
from app.inprocess import ReadModel, TransformersUpstream
from app.inprocess.fp8 import (
    Fp8Mode,
    quantize_model,
    set_fp8_mode,
    use_fp8_products,
)
from app.inprocess.kv import layers_of
from app.inprocess.memory import GIB, limit_memory, model_bytes
from app.inprocess.model import DecodeRow, PrefillJob
from app.inprocess.tiny import rounded_vocab, tiny_config
from app.inprocess.varlen import VarlenPrefill
from app.runs.answer import drive
from app.tokenizer.hf import HFTextTokenizer, load_tokenizer

ROOT = Path(__file__).resolve().parent.parent
FULL_TEXT = dict(
    vocab_size=262144, hidden_size=2816, intermediate_size=2112, moe_intermediate_size=704,
    num_hidden_layers=30, num_attention_heads=16, num_key_value_heads=8, head_dim=256,
    global_head_dim=512, num_global_key_value_heads=2, num_experts=128, top_k_experts=8,
    sliding_window=1024, max_position_embeddings=262144, final_logit_softcapping=30.0,
    layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 5,
    pad_token_id=0, eos_token_id=[1, 106], bos_token_id=2,
)
SMALL_VISION = dict(model_type="gemma4_vision", hidden_size=32, intermediate_size=64,
                    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                    head_dim=16, position_embedding_size=64)
QUESTIONS6 = (
    "Do these two clauses contradict each other?",
    "Does either clause set a deadline?",
    "Does either clause mention money?",
    "Is either clause about confidential information?",
    "Could a court read either clause as unenforceable?",
    "Do both clauses bind the same party?",
)


# -- model ------------------------------------------------------------------------------------


def build_model(config: str, device: str, *, dtype: torch.dtype = torch.bfloat16,
                layers: int = 30, packed: bool = True, vocab: int = 1024) -> ReadModel:
    if config == "small":
        torch.manual_seed(0)
        model = DiffusionGemmaForBlockDiffusion(tiny_config(vocab, layers=3)).eval()
        return ReadModel(model.to(device, dtype if dtype != torch.bfloat16 else torch.float32),
                         packed=packed)
    text = dict(FULL_TEXT, num_hidden_layers=layers,
                layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * (layers // 6))
    cfg = DiffusionGemmaConfig(text_config=text, vision_config=SMALL_VISION, canvas_length=256)
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    # the encoder and decoder hold their own weights until post_init ties them: built in
    # float32 the full model would need twice its 100 GB, so wider dtypes are built in bf16 and
    # converted
    torch.set_default_dtype(torch.bfloat16 if dtype in (torch.float32, torch.float64) else dtype)
    try:
        with torch.device(device):
            model = DiffusionGemmaForBlockDiffusion(cfg)
    finally:
        torch.set_default_dtype(previous)
    torch.nn.Module.to(model, dtype=dtype)  # in place, parameter by parameter (tied ones once)
    return ReadModel(model.eval(), packed=packed)


def to_fp8(model: ReadModel, *, torch_defaults: bool = False) -> None:
    """The model's weights quantized in place (FP8_DYNAMIC), read with the device's FP8
    products (``torch_defaults``: without fast accumulation, inputs quantized in eager
    torch)."""
    model.drop_steps()  # captured over the bf16 weights
    quantize_model(model.model)
    mode = use_fp8_products(model.model, model.device)
    if torch_defaults:
        mode = dataclasses.replace(mode, fast=False, fused=False)
        set_fp8_mode(model.model, mode)
    products = mode.describe(model.model.dtype)
    model.weights = f"fp8 (FP8_DYNAMIC, quantized in memory); products {products}"
    gc.collect()
    if model.device.type == "cuda":
        torch.cuda.empty_cache()


def cap_memory(model: ReadModel, gib: float) -> bool:
    """Cap the process at ``gib`` as the engine's limit does; False (and the refusal printed)
    when the weights leave too little under it."""
    try:
        limit_memory("the benchmark model", model_bytes(model.model), model.device,
                     int(gib * GIB))
    except ConfigError as exc:
        print(f"refused at a {gib:g} GiB limit: {exc}", flush=True)
        return False
    if model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(model.device)
    return True


# -- workloads --------------------------------------------------------------------------------


def _clauses() -> list[str]:
    out: list[str] = []
    for line in (ROOT / "examples" / "contracts.jsonl").read_text().splitlines():
        state = json.loads(line)["state"]
        for part in state.split("Clause ")[1:]:
            out.append("Clause " + part.strip())
    return sorted(set(out))


def _state(base: str, clauses: list[str], target: int, tokenizer: HFTextTokenizer,
           rng: random.Random) -> str:
    """``base`` lengthened with random clauses to about ``target`` tokens."""
    state = base
    while len(tokenizer.encode(state)) < target:
        state += " " + rng.choice(clauses)
    return state


def field_decisions(n: int, tokenizer: HFTextTokenizer, *, seed: int = 0,
                    prompt_min: int = 150, prompt_max: int = 800) -> list[Decision]:
    """The field report's shape: contracts.jsonl's states (cycled), one question each,
    lengthened to prompts of ``prompt_min``-``prompt_max`` tokens (about 50 of them are the
    rendered template, system text and question)."""
    rng = random.Random(seed)
    clauses = _clauses()
    lines = [json.loads(x) for x in
             (ROOT / "examples" / "contracts.jsonl").read_text().splitlines()]
    out = []
    for i in range(n):
        line = lines[i % len(lines)]
        target = max(0, rng.randint(prompt_min, prompt_max) - 50)
        state = _state(line["state"], clauses, target, tokenizer, rng)
        out.append(parse_decision({"id": f"f{i}", "state": state,
                                   "questions": line["questions"]}))
    return out


def multi_decisions(n: int, tokenizer: HFTextTokenizer, *, seed: int = 1,
                    prompt_min: int = 300, prompt_max: int = 800) -> list[Decision]:
    """States of 6 yes/no questions each (documents of ``prompt_min``-``prompt_max`` tokens)."""
    rng = random.Random(seed)
    clauses = _clauses()
    out = []
    for i in range(n):
        state = _state(rng.choice(clauses), clauses, rng.randint(prompt_min, prompt_max) - 150,
                       tokenizer, rng)
        questions = {f"q{k}": {"type": "noul", "instructions": text}
                     for k, text in enumerate(QUESTIONS6)}
        out.append(parse_decision({"id": f"m{i}", "state": state, "questions": questions}))
    return out


# -- the product's schedule -------------------------------------------------------------------


@dataclass
class Figures:
    scenario: str
    path: str
    draws: int
    decisions: int
    question_reads: int
    canvases: int
    wall_s: float
    encoder_s: float
    decoder_s: float
    encoder_calls: int
    decoder_calls: int
    prefilled_tokens: int
    batch_mean: float
    peak_gib: float
    bare_encoder_s: float = 0.0
    bare_decoder_s: float = 0.0
    cache_gib: float = 0.0  #: the prompt cache's size
    cache_hit_rate: float = 0.0  #: prompt lookups the cache answered
    trace: list[tuple[Any, ...]] = field(default_factory=list, repr=False)

    @property
    def padding(self) -> float:
        """Tokens a right-padded encoder would run (rows x longest, per call) / real ones."""
        padded = sum(int(t[1]) * int(t[2]) for t in self.trace if t[0] == "prefill")
        return padded / max(self.prefilled_tokens, 1)

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prefilled_tokens / max(self.encoder_s, 1e-9)

    @property
    def decisions_per_s(self) -> float:
        return self.decisions / self.wall_s

    @property
    def qreads_per_s(self) -> float:
        return self.question_reads / self.wall_s


async def run_decisions(upstream: TransformersUpstream, decisions: Sequence[Decision],
                         settings: ReadSettings, tokenizer: HFTextTokenizer, *, workers: int,
                         chunk: int, in_flight: int) -> tuple[int, int]:
    """execute_run's schedule: ``workers`` slots take chunks of ``chunk`` decisions; a chunk's
    decisions run at once, its reads under one semaphore of ``in_flight``."""
    queue: asyncio.Queue[Sequence[Decision]] = asyncio.Queue()
    for start in range(0, len(decisions), chunk):
        queue.put_nowait(decisions[start:start + chunk])
    counts = [0, 0]  # question reads, canvases

    async def one(decision: Decision, gate: asyncio.Semaphore) -> None:
        plan = plan_decision(decision, settings, tokenizer, max_model_len=upstream.max_model_len)
        flow = DecisionFlow(plan, settings, vocab_size=tokenizer.info.vocab_size)

        async def read(request: ReadRequest) -> ReadResult:
            async with gate:
                result = await upstream.read(request)
            counts[0] += len(plan.units[request.unit].question_indices)
            counts[1] += 1
            return result

        await drive(flow, read)

    async def slot() -> None:
        while not queue.empty():
            part = queue.get_nowait()
            gate = asyncio.Semaphore(in_flight)
            await asyncio.gather(*(one(d, gate) for d in part))

    await asyncio.gather(*(slot() for _ in range(workers)))
    return counts[0], counts[1]


def measure(model: ReadModel, tokenizer: HFTextTokenizer, scenario: str,
            decisions: Sequence[Decision], draws: int, args: Any) -> Figures:
    mode = ReadMode.JOINT if scenario.startswith("joint") else ReadMode.ISOLATED
    settings = ReadSettings(policy=PolicyName.FIXED, fixed_draws=draws, read_mode=mode,
                            canvas_length=int(model.config.canvas_length or 256))
    gc.collect()  # the previous run's prompt cache and buffers, before this one sizes its cache
    if model.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    upstream = TransformersUpstream.from_model(
        model, tokenizer=tokenizer, name="bench", max_batch=args.max_batch,
        prefill_token_budget=args.prefill_budget, flush_ms=args.flush_ms,
        **({"cache_bytes": args.cache_gib << 30} if args.cache_gib else {}))
    upstream.executor.trace = []
    started = time.perf_counter()
    qreads, canvases = asyncio.run(run_decisions(
        upstream, decisions, settings, tokenizer, workers=args.workers, chunk=args.chunk,
        in_flight=args.in_flight))
    wall = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / 2**30 if model.device.type == "cuda" else 0.0
    totals = upstream.executor.totals
    sizes = upstream.batcher.batch_sizes
    trace = list(upstream.executor.trace)
    cache = upstream.cache
    lookups = cache.hits + cache.misses
    upstream.batcher.close()
    figures = Figures(scenario, path_of(model), draws, len(decisions),
                      qreads, canvases, wall, totals["encoder_s"], totals["decoder_s"],
                      totals["encoder_calls"], totals["decoder_calls"], totals["prefilled_tokens"],
                      statistics.mean(sizes), peak, cache_gib=cache.max_bytes / 2**30,
                      cache_hit_rate=cache.hits / lookups if lookups else 0.0, trace=trace)
    cache.clear()
    return figures


def synchronize(model: ReadModel) -> None:
    """Wait for the model's GPU work (nothing to wait for on the CPU)."""
    if model.device.type == "cuda":
        torch.cuda.synchronize()


def calls_split(trace: Sequence[tuple[Any, ...]]) -> str:
    """The traced forwards by kind: calls, tokens (encoder) or rows (decoder), seconds."""
    kinds: dict[str, list[float]] = {}
    for item in trace:
        kind = ("decode" if item[0] == "decode" else "extend" if item[4] else "fresh")
        into = kinds.setdefault(kind, [0, 0, 0.0])
        into[0] += 1
        into[1] += int(item[3]) if item[0] == "prefill" else int(item[1])
        into[2] += float(item[-1])
    parts = [f"{kind} {n:.0f} calls, {size:,.0f} {'rows' if kind == 'decode' else 'tokens'}, "
             f"{s:.2f}s ({1e3 * s / n:.1f} ms a call)" for kind, (n, size, s) in kinds.items()]
    return "; ".join(parts)


def prefill_sweep(model: ReadModel, tokenizer: HFTextTokenizer, decisions: Sequence[Decision],
                  counts: Sequence[int], repeats: int = 5) -> None:
    """Time the encoder alone on 1, 2, 4, ... field prompts (median of ``repeats``): until
    its launches return, and until the GPU is done. A call whose launches take about its wall
    is bound by the host (or waits on the GPU inside), not by the GPU's work."""
    prompts = [tuple(tokenizer.encode(d.state)) for d in decisions[:max(counts)]]
    print("prefill alone: prompts, tokens, launched ms, wall ms, tokens/s", flush=True)
    for n in counts:
        jobs = [PrefillJob(None, ids) for ids in prompts[:n]]
        walls, launches = [], []
        for _ in range(repeats + 1):
            synchronize(model)
            started = time.perf_counter()
            with torch.inference_mode():
                model._prefill_packed(jobs)
            launches.append(time.perf_counter() - started)
            synchronize(model)
            walls.append(time.perf_counter() - started)
        tokens = sum(len(ids) for ids in prompts[:n])
        wall, launch = statistics.median(walls[1:]), statistics.median(launches[1:])
        print(f"  {n:3d} {tokens:7,d} {1e3 * launch:8.1f} {1e3 * wall:8.1f} "
              f"{tokens / wall:10,.0f}", flush=True)


def add_schedule_options(parser: argparse.ArgumentParser) -> None:
    """execute_run's schedule (``run_decisions``) and the engine's batch."""
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--flush-ms", type=float, default=3.0)


# -- FP8 against bf16 --------------------------------------------------------------------------


def p_yes(model: ReadModel, tokenizer: HFTextTokenizer, decisions: Sequence[Decision],
          args: Any) -> list[float]:
    """Each field decision's P(yes) (one draw), read through the engine."""
    settings = ReadSettings(policy=PolicyName.FIXED, fixed_draws=1,
                            canvas_length=int(model.config.canvas_length or 256))
    upstream = TransformersUpstream.from_model(model, tokenizer=tokenizer, name="bench",
                                               max_batch=args.max_batch)

    async def one(decision: Decision) -> float:
        plan = plan_decision(decision, settings, tokenizer, max_model_len=upstream.max_model_len)
        flow = DecisionFlow(plan, settings, vocab_size=tokenizer.info.vocab_size)
        await drive(flow, upstream.read)
        return float(flow.answers()[0].p_yes or 0.0)

    async def main() -> list[float]:
        try:
            return list(await asyncio.gather(*(one(d) for d in decisions)))
        finally:
            await upstream.aclose()

    return asyncio.run(main())


def compare_fp8(model: ReadModel, tokenizer: HFTextTokenizer, n: int, args: Any) -> None:
    """The field's P(yes) in bf16, then with the same weights quantized (FP8 products, then
    dequantized products): mean and max |dP|, and each one's AUC against the expected labels
    of ``examples/contracts.jsonl``."""
    from sklearn.metrics import roc_auc_score

    lines = [json.loads(x) for x in
             (ROOT / "examples" / "contracts.jsonl").read_text().splitlines()]
    picked = sorted(random.Random(0).sample(range(len(lines)), min(n, len(lines))))
    truth = [lines[i]["expected"]["conflict"] == "yes" for i in picked]
    every = field_decisions(len(lines), tokenizer)
    decisions = [every[i] for i in picked]
    n = len(decisions)
    unquantized = model.weights
    runs = {unquantized: p_yes(model, tokenizer, decisions, args)}
    to_fp8(model)
    runs[f"fp8 ({model.weights.rpartition('products ')[2]})"] = p_yes(
        model, tokenizer, decisions, args)
    set_fp8_mode(model.model, Fp8Mode())
    model.drop_steps()  # captured with the FP8 products
    runs["fp8, dequantized products"] = p_yes(model, tokenizer, decisions, args)
    base = torch.tensor(runs[unquantized])
    for name, values in runs.items():
        delta = (torch.tensor(values) - base).abs()
        print(f"{name}: AUC {roc_auc_score(truth, values):.4f}, |dP| vs {unquantized} mean "
              f"{delta.mean().item():.4f} max {delta.max().item():.4f} ({n} decisions)",
              flush=True)


# -- the bare ceiling -------------------------------------------------------------------------


class Bare:
    """Bare transformers forwards of given shapes, timed once per shape (memoised)."""

    def __init__(self, model: ReadModel) -> None:
        self.model = model
        self.times: dict[tuple[Any, ...], float] = {}
        self.caches: dict[int, DynamicCache] = {}
        self.rng = torch.Generator().manual_seed(5)

    def _ids(self, rows: int, n: int) -> torch.Tensor:
        return torch.randint(200, self.model.vocab_size, (rows, n), generator=self.rng).to(
            self.model.device)

    def _time(self, key: tuple[Any, ...], fn: Any) -> float:
        key = (*key, self.model.kernels)  # transformers' forwards, or with the fused kernels
        if key not in self.times:
            fn()  # warm
            synchronize(self.model)
            started = time.perf_counter()
            fn()
            synchronize(self.model)
            self.times[key] = time.perf_counter() - started
        return self.times[key]

    @torch.inference_mode()
    def encoder(self, rows: int, width: int) -> float:
        ids = self._ids(rows, width)
        return self._time(("enc", rows, width), lambda: self.model.model.model.encoder(
            input_ids=ids, cache=DynamicCache(config=self.model.text_config)))

    @torch.inference_mode()
    def decoder(self, rows: int, length: int, width: int, slots: int) -> float:
        length = -(-length // 64) * 64
        if length not in self.caches:
            cache = DynamicCache(config=self.model.text_config)
            self.model.model.model.encoder(input_ids=self._ids(1, length), cache=cache)
            self.caches[length] = cache
        base = self.caches[length]
        canvas = self._ids(rows, width)

        def run() -> None:
            cache = DynamicCache(config=self.model.text_config)
            for mine, theirs in zip(layers_of(cache), layers_of(base), strict=True):
                mine.lazy_initialization(theirs.keys, theirs.values)
                mine.keys = theirs.keys.expand(rows, *theirs.keys.shape[1:])
                mine.values = theirs.values.expand(rows, *theirs.values.shape[1:])
            hidden = self.model.model.model.decoder(decoder_input_ids=canvas,
                                                    cache=cache).last_hidden_state
            self.model.slot_logits(hidden[:, :slots].reshape(-1, hidden.shape[-1])).cpu()

        return self._time(("dec", rows, length, width, slots), run)

    def replay(self, figures: Figures) -> None:
        """Sum the bare time of every traced call; shapes are rounded up (rows to 8, lengths
        to 64) so that few distinct shapes are timed: the ceiling is, if anything, low."""
        for item in figures.trace:
            rows = -(-int(item[1]) // 8) * 8
            if item[0] == "prefill":
                figures.bare_encoder_s += self.encoder(rows, -(-int(item[2]) // 64) * 64)
            else:
                figures.bare_decoder_s += self.decoder(rows, int(item[2]), int(item[3]),
                                                       int(item[4]))


# -- correctness ------------------------------------------------------------------------------


PATHS = {"collated": (False, False, False, False), "packed": (True, False, False, False),
         "kernels": (True, True, False, False), "graphs": (True, True, True, False),
         "compiled": (True, True, True, True)}
"""path name -> (packed reads, kernels, fixed-layout steps in CUDA graphs, compiled encoder
layers): ``collated`` is the engine before issue 18."""


def path_of(model: ReadModel) -> str:
    flags = (model.packed, model.kernels, model.graphs, model.compiled)
    return next(name for name, path in PATHS.items() if path == flags)


def use_path(model: ReadModel, path: str) -> None:
    model.packed, model.kernels, model.graphs, model.compiled = PATHS[path]


@dataclass
class Reads:
    """Reads of mixed, chained and grouped rows (``make_reads``)."""

    doc: tuple[int, ...]
    suffixes: list[tuple[int, ...]]
    lone: list[tuple[int, ...]]
    canvases: list[tuple[int, ...]]
    plan: list[tuple[int, int]]  #: per row: (prompt, canvas)
    slots: tuple[int, ...] = (0, 5)
    labels: tuple[int, ...] = ()

    @property
    def prompts(self) -> list[tuple[int, ...]]:
        return [self.doc + s for s in self.suffixes] + self.lone


def make_reads(model: ReadModel) -> Reads:
    gen = torch.Generator().manual_seed(99)

    def ids(n: int) -> tuple[int, ...]:
        return tuple(torch.randint(200, model.vocab_size, (n,), generator=gen).tolist())

    window = int(getattr(model.text_config, "sliding_window", 16) or 16)
    doc = ids(window + window // 4)
    suffixes = [ids(n) for n in (3, 17, 40)]
    lone = [ids(window // 3), ids(2 * window + 5)]
    canvases = [ids(16) for _ in range(3)]
    plan = [(k, c) for c in range(3) for k in range(5) if not (c and k == 4)]
    return Reads(doc, suffixes, lone, canvases, plan, labels=ids(4))


def check_paths(model: ReadModel, label: str, *, skip: Sequence[str] = ()) -> None:
    """Each engine path vs one plain unbatched transformers forward per read (experts ``eager``:
    float32 loops, and ``grouped_mm``: transformers' default), on mixed, chained and grouped
    rows: prompts past the sliding window, question suffixes on a shared document, draws."""
    reads = make_reads(model)
    doc, suffixes, lone, canvases, plan = (reads.doc, reads.suffixes, reads.lone, reads.canvases,
                                           reads.plan)
    slots, labels, prompts = reads.slots, reads.labels, reads.prompts

    def engine() -> list[torch.Tensor]:
        root = model.prefill([PrefillJob(None, doc)])[0]
        entries = [*model.prefill([PrefillJob(root, s) for s in suffixes]),
                   *model.prefill([PrefillJob(None, p) for p in lone])]
        rows = [DecodeRow(entries[k], canvases[c], slots, labels) for k, c in plan]
        return [r.logprobs for r in model.decode(rows)]

    def plain(experts: str) -> list[torch.Tensor]:
        use_path(model, "collated")
        model.model.set_experts_implementation(experts)
        out = [_plain_read(model, prompts[k], canvases[c], slots, labels) for k, c in plan]
        model.model.set_experts_implementation("grouped_mm")
        return out

    got = {"plain-eager": plain("eager"), "plain-grouped": plain("grouped_mm")}
    for path in PATHS:
        if path not in skip:
            use_path(model, path)
            got[path] = engine()
    model.model.set_experts_implementation("eager")  # float32 loops, kernels keep them
    for path in ("collated", "kernels"):
        use_path(model, path)
        got[f"{path}/eager-experts"] = engine()
    use_path(model, "collated")
    model.model.set_experts_implementation("grouped_mm")

    def diff(a: str, b: str) -> str:
        if a not in got:
            return f"{a} not run"
        worst = max(float((x - y).abs().max()) for x, y in zip(got[a], got[b], strict=True))
        return f"{a} vs {b} {worst:.1e}"

    print(f"check {label} {model.model.dtype} {model.text_config.num_hidden_layers} layers, "
          f"{len(plan)} rows (3 questions on a shared {len(doc)}-token document, prompts "
          f"{len(lone[0])}/{len(lone[1])}, 3 draws), max |dlogprob|: "
          + "; ".join([diff("plain-grouped", "plain-eager"), diff("collated", "plain-eager"),
                       diff("packed", "collated"), diff("kernels", "collated"),
                       diff("kernels", "plain-eager"), diff("graphs", "kernels"),
                       diff("compiled", "kernels"), diff("compiled", "collated"),
                       diff("collated/eager-experts", "plain-eager"),
                       diff("kernels/eager-experts", "plain-eager"),
                       diff("kernels/eager-experts", "collated/eager-experts")]), flush=True)
    noise = []
    for copies in (1, 8):
        noise.append(_plain_read(model, lone[1], canvases[0], slots, labels, copies=copies))
    print(f"noise floor: the plain forward of the {len(lone[1])}-token prompt in a batch of 8 "
          f"identical rows vs alone, max |dlogprob| {float((noise[0] - noise[1]).abs().max()):.1e}",
          flush=True)
    check_experts(model)


def check_experts(model: ReadModel, tokens: int = 8192) -> None:
    """One layer's experts on random routed tokens: ``grouped_experts`` and transformers'
    ``grouped_mm`` against the float32 per-expert loop (relative max error)."""
    from transformers.integrations.moe import grouped_mm_experts_forward

    from app.inprocess.kernels import grouped_experts

    layer = model.model.model.decoder.layers[0]
    gen = torch.Generator(device=model.device).manual_seed(3)
    hidden = torch.randn((tokens, model.text_config.hidden_size), generator=gen,
                         device=model.device, dtype=model.model.dtype)
    with torch.inference_mode():
        _, weights, index = layer.router(hidden)
        experts = layer.experts
        loop = type(experts).forward.__wrapped__(experts, hidden, index, weights)
        ours = grouped_experts(experts, hidden, index, weights)
        theirs = grouped_mm_experts_forward(experts, hidden, index, weights)
    scale = float(loop.abs().max())
    print(f"experts {model.model.dtype}, {tokens} tokens, max |x - loop| / max |loop|: "
          f"grouped_experts {float((ours - loop).abs().max()) / scale:.1e}, transformers "
          f"grouped_mm {float((theirs - loop).abs().max()) / scale:.1e}", flush=True)


def _plain_read(model: ReadModel, prompt: Sequence[int], canvas: Sequence[int],
                slots: Sequence[int], labels: Sequence[int], copies: int = 1) -> torch.Tensor:
    cache = DynamicCache(config=model.text_config)
    with torch.inference_mode():
        model.model.model.encoder(
            input_ids=torch.tensor([list(prompt)] * copies, device=model.device), cache=cache)
        logits = model.model(cache=cache, decoder_input_ids=torch.tensor(
            [list(canvas)] * copies, device=model.device)).logits
    return torch.log_softmax(logits[0, list(slots)].float(), -1)[:, list(labels)].cpu()


# -- report -----------------------------------------------------------------------------------


def _print(results: list[Figures]) -> None:
    print(f"{'scenario':<10}{'path':<14}{'draws':>6}{'decisions':>10}{'q-reads':>8}{'wall s':>8}"
          f"{'dec/s':>8}{'q-reads/s':>10}{'enc s':>7}{'dec s':>7}{'bare enc':>9}{'bare dec':>9}"
          f"{'model%':>7}{'cache%':>7}{'outside%':>9}{'calls e/d':>11}{'batch':>7}{'pad x':>6}"
          f"{'GiB':>6}")
    for r in results:
        engine = r.encoder_s + r.decoder_s
        bare = r.bare_encoder_s + r.bare_decoder_s
        print(f"{r.scenario:<10}{r.path:<14}{r.draws:>6}{r.decisions:>10}{r.question_reads:>8}"
              f"{r.wall_s:>8.2f}{r.decisions_per_s:>8.1f}{r.qreads_per_s:>10.1f}"
              f"{r.encoder_s:>7.2f}{r.decoder_s:>7.2f}{r.bare_encoder_s:>9.2f}"
              f"{r.bare_decoder_s:>9.2f}{100 * bare / r.wall_s:>7.0f}"
              f"{100 * (engine - bare) / r.wall_s:>7.0f}"
              f"{100 * (r.wall_s - engine) / r.wall_s:>9.0f}"
              f"{r.encoder_calls:>6}/{r.decoder_calls:<4}{r.batch_mean:>7.1f}{r.padding:>6.2f}"
              f"{r.peak_gib:>6.1f}")
    print("model%: bare forwards of the same shapes (the encoder's right-padded, as transformers "
          "batches them) / wall; cache%: the engine's forwards minus the bare ones (collation, "
          "masks, cutting entries; negative where the engine skips padding) / wall; outside%: "
          "wall minus the engine's forwards (batching waits, planning, the event loop) / wall; "
          "pad x: the padded encoder's tokens / the prompt tokens encoded")
    for r in results:
        if r.scenario.startswith("iso"):
            joint = next((j for j in results if j.scenario.startswith("joint")
                          and j.draws == r.draws and j.path == r.path), None)
            if joint is not None:
                print(f"{r.path} draws={r.draws}: isolated / joint (question reads/s) = "
                      f"{r.qreads_per_s / joint.qreads_per_s:.2f}")


def _profile(model: ReadModel, tokenizer: HFTextTokenizer, scenario: str,
             decisions: Sequence[Decision], draws: int, args: Any, out: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        figures = measure(model, tokenizer, scenario, decisions, draws, args)
    sort = "self_cuda_time_total" if model.device.type == "cuda" else "self_cpu_time_total"
    averages = prof.key_averages()
    kernels = averages.table(sort_by=sort, row_limit=60, max_name_column_width=110)
    calls = averages.table(sort_by=sort.removeprefix("self_"), row_limit=60,
                           max_name_column_width=110)
    out.write_text(f"by own time (kernels)\n{kernels}\nby total time (calls)\n{calls}")
    print(f"profile of {len(decisions)} {scenario} decisions x {draws} draws "
          f"({figures.path}; wall {figures.wall_s:.2f}s under the "
          f"profiler) -> {out}")
    print("\n".join(kernels.splitlines()[:34]))


def run_checks(args: Any, vocab: int) -> None:
    """The paths' equality check: a 6-layer full-width model per dtype of ``--check``, or the
    tiny one."""
    if args.config == "full" and args.check:
        for name in args.check.split(","):
            small = build_model("full", args.device, dtype=getattr(torch, name), layers=6)
            check_paths(small, "6-layer full-width", skip=() if args.check_compiled
                        else ("compiled",))
            del small
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    elif args.check:
        check_paths(build_model("small", args.device, dtype=torch.float32, vocab=vocab), "tiny")


def _before_scenarios(model: ReadModel, tokenizer: HFTextTokenizer, field: Sequence[Decision],
                      multi: Sequence[Decision], args: Any) -> None:
    """``--prefill-sweep`` and ``--profile``."""
    if args.prefill_sweep:
        prefill_sweep(model, tokenizer, field, [int(n) for n in args.prefill_sweep.split(",")])
    if args.profile:
        where, _, rest = args.profile.partition(":")
        draws, _, scenario = rest.partition(":")
        scenario = scenario or "field"
        chosen = field if scenario == "field" else multi
        _profile(model, tokenizer, scenario, chosen[:args.profile_decisions], int(draws or 1),
                 args, Path(where))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=("full", "small"), default="full")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer dir (default: the real-vocabulary approximation in "
                             "../shared/tokenizers for full, the stand-in for small)")
    parser.add_argument("--scenarios", default="field:1,field:4,iso6:4,joint6:4")
    parser.add_argument("--paths", default="kernels",
                        help="comma-separated: collated (the engine before issue 18), packed, "
                             "kernels (packed + fused norms and experts), graphs (+ decoder "
                             "steps in CUDA graphs, the default), compiled (+ encoder layers "
                             "through torch.compile), each optionally @MAX_BATCH")
    parser.add_argument("--states", type=int, default=1056)
    parser.add_argument("--multi-states", type=int, default=64)
    add_schedule_options(parser)
    parser.add_argument("--prefill-budget", type=int, default=16384)
    parser.add_argument("--cache-gib", type=int, default=0, help="0: the engine's default")
    parser.add_argument("--no-bare", action="store_true")
    parser.add_argument("--check", default="float32", help="dtypes of the 6-layer check, or ''")
    parser.add_argument("--check-compiled", action="store_true",
                        help="the full-width check also runs the compiled path (minutes)")
    parser.add_argument("--profile", default="", help="FILE:DRAWS[:SCENARIO]: write a torch "
                        "profile of --profile-decisions decisions of SCENARIO (field, iso6 "
                        "or joint6; default field) x DRAWS to FILE (e.g. $OUT/profile.txt:1)")
    parser.add_argument("--prefill-sweep", default="", metavar="N,N,...",
                        help="time the encoder alone on N field prompts (e.g. 1,4,16,64)")
    parser.add_argument("--profile-decisions", type=int, default=256)
    parser.add_argument("--time-limit-s", type=float, default=480.0)
    parser.add_argument("--weights", choices=("bf16", "fp8"), default="bf16",
                        help="fp8: the random weights quantized on the device (FP8_DYNAMIC)")
    parser.add_argument("--fp8-torch-defaults", action="store_true",
                        help="with --weights fp8: the FP8 products without fast accumulation "
                             "and the inputs quantized in eager torch (for comparison)")
    parser.add_argument("--gpu-memory", type=float, default=0.0,
                        help="GiB: cap the process as DREADS_ENGINE_GPU_MEMORY does (0: no cap)")
    parser.add_argument("--compare-fp8", type=int, default=0, metavar="N",
                        help="only compare P(yes) of N field decisions: bf16, then FP8")
    parser.add_argument("--attention-per-prompt", action="store_true",
                        help="the prefill's attention a call per prompt, not one call a layer")
    args = parser.parse_args()
    VarlenPrefill.one_call = not args.attention_per_prompt
    began = time.perf_counter()
    tok_dir = args.tokenizer or (str(ROOT.parent / "shared" / "tokenizers" /
                                     "diffusiongemma-approx") if args.config == "full"
                                 else "standin")
    tokenizer = load_tokenizer(tok_dir)
    vocab = rounded_vocab(tokenizer.info.vocab_size)
    run_checks(args, vocab)
    paths = args.paths.split(",")
    model = build_model(args.config, args.device, vocab=vocab)
    if args.compare_fp8:
        compare_fp8(model, tokenizer, args.compare_fp8, args)
        return
    if args.weights == "fp8":
        to_fp8(model, torch_defaults=args.fp8_torch_defaults)
    use_path(model, paths[-1].partition("@")[0])
    print(f"model {args.config} on {args.device}: "
          f"{sum(p.numel() for p in model.model.parameters()) / 1e9:.2f} B parameters, "
          f"weights {model.weights}, {model_bytes(model.model) / GIB:.2f} GiB; "
          f"built at {time.perf_counter() - began:.1f}s; torch {torch.__version__}; "
          f"tokenizer {tok_dir} ({tokenizer.info.vocab_size} ids)", flush=True)
    if args.gpu_memory and not cap_memory(model, args.gpu_memory):
        return
    if args.check and args.weights == "bf16":
        check_experts(model)
    field = field_decisions(args.states, tokenizer)
    multi = multi_decisions(args.multi_states, tokenizer)
    lengths = [len(tokenizer.encode(d.state)) for d in field[:200]]
    print(f"field: {len(field)} states, state text {min(lengths)}-{max(lengths)} tokens "
          f"(+ ~50 template); multi: {len(multi)} states x 6 questions", flush=True)
    for path in dict.fromkeys(p.partition("@")[0] for p in paths):  # warm-up (and compile)
        use_path(model, path)
        started = time.perf_counter()
        measure(model, tokenizer, "field", field[:32], 2, args)
        measure(model, tokenizer, "iso6", multi[:4], 1, args)
        print(f"  warm-up {path}: {time.perf_counter() - started:.1f}s", flush=True)
    _before_scenarios(model, tokenizer, field, multi, args)
    results: list[Figures] = []
    bare = Bare(model)
    for item in args.scenarios.split(","):
        scenario, _, draws = item.partition(":")
        for spec in paths:
            path, _, batch = spec.partition("@")
            use_path(model, path)
            if time.perf_counter() - began > args.time_limit_s:
                print(f"time limit: skipped {spec} {item}")
                continue
            decisions = field if scenario == "field" else multi
            try:
                figures = measure(model, tokenizer, scenario, decisions, int(draws or 1),
                                  argparse.Namespace(**{**vars(args), "max_batch": int(
                                      batch or args.max_batch)}))
            except Exception as exc:  # an out-of-memory run is a figure too
                print(f"  {spec} {item}: failed: {str(exc)[:300]}", flush=True)
                continue
            figures.path = spec
            if not args.no_bare:
                bare.replay(figures)
            results.append(figures)
            steps = model._steps
            graphs = (f", graphs so far: {steps.captured} captured in {steps.capture_s:.1f}s, "
                      f"{steps.fallbacks} batches read without" if steps is not None else "")
            print(f"    {calls_split(figures.trace)}", flush=True)
            print(f"  {path} {item}: {figures.wall_s:.2f}s, {figures.decisions_per_s:.1f} "
                  f"decisions/s, enc {figures.encoder_s:.2f}s dec {figures.decoder_s:.2f}s, "
                  f"bare enc {figures.bare_encoder_s:.2f}s dec {figures.bare_decoder_s:.2f}s"
                  f"{graphs}, prefill {figures.prefill_tokens_per_s:,.0f} tokens/s, "
                  f"prompt cache {figures.cache_gib:.2f} GiB "
                  f"({figures.cache_hit_rate:.0%} hits), peak {figures.peak_gib:.2f} GiB "
                  f"[{time.perf_counter() - began:.0f}s]", flush=True)
    _print(results)


if __name__ == "__main__":
    main()
