"""Throughput of the in-process transformers engine: isolated reads with and without prefix
sharing, and joint reads, for 1 to 4 draws.

The model is the full-size DiffusionGemma architecture (the released text config) with random
bf16 weights built straight on the GPU (same cost as the real checkpoint), or a tiny config for a
CPU smoke run. The workload is the field report's shape: D states (clause pairs of 300-800
prompt tokens after a shared system text), Q yes/no questions per state; reads go through
``TransformersUpstream.read`` (micro-batcher, prefill cache, batched decoder) as the runner sends
them: one draw of every open read per round, all decisions in flight at once.

    python bench/transformers_reads.py --config full --device cuda     # H200
    python bench/transformers_reads.py --config small --device cpu     # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, DynamicCache

from app.engine.types import Endpoint, ReadRequest
from app.upstream.transformers_engine import ReadModel, TransformersUpstream
from app.upstream.transformers_engine.model import DecodeRow, PrefillJob
from app.upstream.transformers_engine.tiny import tiny_config

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
TURN_CLOSE = 106
LINE_TOKENS = 4  # "q0", ":", " yes", "\n"


@dataclass(frozen=True)
class Workload:
    states: int
    questions: int
    prompt_min: int
    prompt_max: int
    vocab: int
    seed: int = 0


@dataclass
class Result:
    mode: str
    draws: int
    canvases: int
    question_reads: int
    wall_s: float
    prefilled_tokens: int
    encoder_calls: int
    decoder_calls: int
    encoder_s: float
    decoder_s: float
    batch_mean: float
    batch_max: int
    peak_gib: float

    @property
    def qreads_per_s(self) -> float:
        return self.question_reads / self.wall_s


def build_model(config: str, device: str, *, dtype: torch.dtype = torch.bfloat16,
                layers: int = 30) -> ReadModel:
    if config == "small":
        torch.manual_seed(0)
        return ReadModel(DiffusionGemmaForBlockDiffusion(tiny_config(1024, layers=3)).eval())
    text = dict(FULL_TEXT, num_hidden_layers=layers,
                layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * (layers // 6))
    cfg = DiffusionGemmaConfig(text_config=text, vision_config=SMALL_VISION, canvas_length=256)
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = DiffusionGemmaForBlockDiffusion(cfg)
    finally:
        torch.set_default_dtype(previous)
    if dtype == torch.float64:  # grouped_mm has no float64 kernel
        model.set_experts_implementation("eager")
    return ReadModel(model.eval())


class _Ids:
    """Deterministic random token ids (never the special ids below 200)."""

    def __init__(self, vocab: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.vocab = vocab

    def take(self, n: int) -> list[int]:
        return [self.rng.randrange(200, self.vocab) for _ in range(n)]


def _prompts(work: Workload) -> tuple[list[list[int]], list[list[list[int]]], list[list[int]]]:
    """Per state: the document prompt (system + state), the question blocks, the label ids."""
    ids = _Ids(work.vocab, work.seed)
    system = [2, *ids.take(40)]
    docs, blocks, labels = [], [], []
    for _ in range(work.states):
        n = ids.rng.randrange(work.prompt_min, work.prompt_max + 1)
        docs.append(system + ids.take(n))
        blocks.append([ids.take(ids.rng.randrange(18, 40)) for _ in range(work.questions)])
        labels.append(ids.take(2))  # "yes", "no"
    return docs, blocks, labels


def _canvas(n_questions: int, noise: list[int], line: list[int]) -> tuple[list[int], list[int]]:
    """One answer line per question, slot = the label position, turn close, pad to 16."""
    canvas: list[int] = []
    slots = []
    for k in range(n_questions):
        slots.append(len(canvas) + 2)
        canvas += [line[0] + k, line[1], noise[k], line[2]]
    canvas.append(TURN_CLOSE)
    width = -(-len(canvas) // 16) * 16
    return canvas + [0] * (width - len(canvas)), slots


def _request(prompt: list[int], canvas: list[int], slots: list[int], labels: list[int]
             ) -> ReadRequest:
    body = {
        "model": "bench", "prompt": prompt, "max_tokens": len(canvas), "logprobs": 0,
        "logprob_token_ids": sorted(labels), "return_tokens_as_token_ids": True,
        "vllm_xargs": {"diffusion_seed_canvas": canvas, "diffusion_canvas_length": len(canvas),
                       "diffusion_max_steps": 1, "diffusion_read_only": True},
    }
    return ReadRequest(unit=0, draw=0, seed=0, endpoint=Endpoint.COMPLETIONS, body=body,
                       slots=tuple(slots), logprob_ids=tuple(sorted(labels)))


def round_requests(work: Workload, joint: bool, draw: int) -> list[tuple[int, ReadRequest]]:
    """One draw of every read unit: (questions answered, request)."""
    docs, blocks, labels = _prompts(work)
    noise = _Ids(work.vocab, 1000 + draw)
    line = [300, 301, 302]
    out = []
    for doc, qblocks, lab in zip(docs, blocks, labels, strict=True):
        if joint:
            prompt = doc + [t for b in qblocks for t in b]
            canvas, slots = _canvas(len(qblocks), noise.take(len(qblocks)), line)
            out.append((len(qblocks), _request(prompt, canvas, slots, lab)))
            continue
        for block in qblocks:
            canvas, slots = _canvas(1, noise.take(1), line)
            out.append((1, _request(doc + block, canvas, slots, lab)))
    return out


async def _run_rounds(upstream: TransformersUpstream, work: Workload, joint: bool,
                      draws: int) -> tuple[int, int]:
    canvases = qreads = 0
    for draw in range(draws):
        batch = round_requests(work, joint, draw)
        await asyncio.gather(*(upstream.read(r) for _, r in batch))
        canvases += len(batch)
        qreads += sum(n for n, _ in batch)
    return canvases, qreads


def measure(model: ReadModel, work: Workload, mode: str, draws: int, args: Any,
            max_batch: int) -> Result:
    share = mode != "isolated-no-sharing"
    cache_bytes = (args.cache_gib << 30) if share else 0
    upstream = TransformersUpstream.from_model(
        model, tokenizer=None, name="bench", max_batch=max_batch,  # type: ignore[arg-type]
        prefill_token_budget=args.prefill_budget, cache_bytes=cache_bytes, flush_ms=args.flush_ms)
    if not share:
        upstream.executor.min_shared_prefix = 1 << 30
    if model.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    canvases, qreads = asyncio.run(_run_rounds(upstream, work, mode == "joint", draws))
    wall = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / 2**30 if model.device.type == "cuda" else 0.0
    sizes = upstream.batcher.batch_sizes
    totals = upstream.executor.totals
    upstream.batcher.executor.shutdown(wait=True)
    return Result(f"{mode}@{max_batch}", draws, canvases, qreads, wall, totals["prefilled_tokens"],
                  totals["encoder_calls"], totals["decoder_calls"], totals["encoder_s"],
                  totals["decoder_s"], statistics.mean(sizes),
                  max(sizes), peak)


def check_against_plain_forward(model: ReadModel) -> None:
    """Batched, mixed-length, prefix-chained reads vs one unbatched plain forward each."""
    ids = _Ids(model.vocab_size, 99)
    prompts = [ids.take(n) for n in (300, 700, 1300)]  # 1300 > the 1024 sliding window
    prompts.append(prompts[2][:1200] + ids.take(40))  # shares a 1200-token prefix
    canvas, slots = _canvas(3, ids.take(3), [300, 301, 302])
    labels = ids.take(4)
    single = model.decode([DecodeRow(model.prefill([PrefillJob(None, tuple(prompts[0]))])[0],
                                     tuple(canvas), tuple(slots), tuple(labels))])
    entries = model.prefill([PrefillJob(None, tuple(p)) for p in prompts[:3]])
    prefix = model.prefill([PrefillJob(None, tuple(prompts[2][:1200]))])[0]
    entries.append(model.prefill([PrefillJob(prefix, tuple(prompts[3][1200:]))])[0])
    rows = [DecodeRow(e, tuple(canvas), tuple(slots), tuple(labels)) for e in entries]
    batched = model.decode(rows)
    references = [_plain_read(model, p, canvas, slots, labels) for p in prompts]
    for name, pairs in (("single row", zip(references[:1], single, strict=True)),
                        ("batched+chained", zip(references, batched, strict=True))):
        dlp, dprob = [], []
        for reference, result in pairs:
            dlp.append(float((reference - result.logprobs).abs().max()))
            dprob.append(float((reference.softmax(-1) - result.logprobs.softmax(-1))
                               .abs().max()))
        print(f"check {model.model.dtype} {model.text_config.num_hidden_layers} layers, "
              f"{name} vs plain unbatched forward, per row (prompts 300/700/1300/1200+40): "
              f"max |dlogprob| {', '.join(f'{x:.1e}' for x in dlp)}; max |dp| over the labels "
              f"{', '.join(f'{x:.1e}' for x in dprob)}")


def _plain_read(model: ReadModel, prompt: list[int], canvas: list[int], slots: list[int],
                labels: list[int], copies: int = 1) -> torch.Tensor:
    cache = DynamicCache(config=model.text_config)
    with torch.inference_mode():
        model.model.model.encoder(
            input_ids=torch.tensor([prompt] * copies, device=model.device), cache=cache)
        logits = model.model(cache=cache, decoder_input_ids=torch.tensor(
            [canvas] * copies, device=model.device)).logits
    return torch.log_softmax(logits[0, slots].float(), -1)[:, labels].cpu()


def noise_floor(model: ReadModel) -> None:
    """transformers alone: the same read in a batch of 8 identical rows vs alone."""
    ids = _Ids(model.vocab_size, 98)
    canvas, slots = _canvas(3, ids.take(3), [300, 301, 302])
    labels = ids.take(4)
    for n in (300, 1300):
        prompt = ids.take(n)
        alone = _plain_read(model, prompt, canvas, slots, labels)
        batch = _plain_read(model, prompt, canvas, slots, labels, copies=8)
        dp = float((alone.softmax(-1) - batch.softmax(-1)).abs().max())
        print(f"noise floor {model.model.dtype}: plain forward, batch of 8 vs 1, prompt {n}: "
              f"max |dlogprob| {float((alone - batch).abs().max()):.1e}, max |dp| {dp:.1e}")


def _print(results: list[Result]) -> None:
    head = (f"{'mode@max_batch':<26}{'draws':>6}{'canvases':>9}{'q-reads':>8}{'wall s':>8}"
            f"{'canv/s':>8}{'q-reads/s':>10}{'prefill tok':>12}{'enc n/s':>11}{'dec n/s':>11}"
            f"{'batch avg/max':>15}{'peak GiB':>9}")
    print(head)
    for r in results:
        print(f"{r.mode:<26}{r.draws:>6}{r.canvases:>9}{r.question_reads:>8}{r.wall_s:>8.2f}"
              f"{r.canvases / r.wall_s:>8.1f}{r.qreads_per_s:>10.1f}{r.prefilled_tokens:>12}"
              f"{r.encoder_calls:>4}/{r.encoder_s:<6.2f}{r.decoder_calls:>4}/{r.decoder_s:<6.2f}"
              f"{r.batch_mean:>9.1f}/{r.batch_max:<5}"
              f"{r.peak_gib:>9.1f}")
    print()
    for draws, batch in sorted({(r.draws, r.mode.split("@")[1]) for r in results}):
        by = {r.mode.split("@")[0]: r for r in results
              if r.draws == draws and r.mode.endswith(f"@{batch}")}
        where = f"draws={draws} max_batch={batch}"
        if "isolated-sharing" in by and "joint" in by:
            ratio = by["isolated-sharing"].qreads_per_s / by["joint"].qreads_per_s
            print(f"{where}: isolated-with-sharing / joint (question reads/s) = {ratio:.2f}")
        if "isolated-sharing" in by and "isolated-no-sharing" in by:
            gain = by["isolated-sharing"].qreads_per_s / by["isolated-no-sharing"].qreads_per_s
            print(f"{where}: isolated sharing / no sharing = {gain:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=("full", "small"), default="full")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--states", type=int, default=32)
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--prompt-min", type=int, default=300)
    parser.add_argument("--prompt-max", type=int, default=800)
    parser.add_argument("--draws", default="1,2,4")
    parser.add_argument("--modes", default="isolated-no-sharing,isolated-sharing,joint")
    parser.add_argument("--max-batch", default="64", help="comma-separated values to compare")
    parser.add_argument("--prefill-budget", type=int, default=16384)
    parser.add_argument("--cache-gib", type=int, default=16)
    parser.add_argument("--flush-ms", type=float, default=3.0)
    parser.add_argument("--time-limit-s", type=float, default=420.0)
    parser.add_argument("--check-dtypes", default="float32",
                        help="dtypes of the 6-layer full-width correctness check")
    parser.add_argument("--check-only", action="store_true")
    args = parser.parse_args()
    began = time.perf_counter()
    if args.config == "full":
        for name in args.check_dtypes.split(","):
            small = build_model("full", args.device, dtype=getattr(torch, name), layers=6)
            check_against_plain_forward(small)
            noise_floor(small)
            del small
            torch.cuda.empty_cache()
    if args.check_only:
        return
    model = build_model(args.config, args.device)
    print(f"model {args.config} on {args.device}: "
          f"{sum(p.numel() for p in model.model.parameters()) / 1e9:.2f} B parameters, "
          f"built in {time.perf_counter() - began:.1f}s; torch {torch.__version__}")
    work = Workload(args.states, args.questions, args.prompt_min, args.prompt_max,
                    model.vocab_size)
    print(f"workload: {work}; max_batch {args.max_batch}, prefill budget "
          f"{args.prefill_budget} tokens, flush {args.flush_ms} ms")
    if args.config == "full":
        check_against_plain_forward(model)
    warm = Workload(2, 2, 64, 96, model.vocab_size, seed=7)
    batches = [int(b) for b in args.max_batch.split(",")]
    for mode in ("isolated-sharing", "joint"):
        measure(model, warm, mode, 2, args, batches[0])
    results: list[Result] = []
    for max_batch in batches:
        for draws in (int(d) for d in args.draws.split(",")):
            for mode in args.modes.split(","):
                if time.perf_counter() - began > args.time_limit_s:
                    print(f"time limit: skipped {mode}@{max_batch} draws={draws}")
                    continue
                results.append(measure(model, work, mode, draws, args, max_batch))
                print(f"  done {results[-1].mode} draws={draws} in {results[-1].wall_s:.2f}s",
                      flush=True)
    _print(results)

if __name__ == "__main__":
    main()
