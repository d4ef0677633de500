"""Float32 equality of the engine's read paths on the full-size model, row by row, and profiles
of single encoder and decoder calls.

**check** (``--check DTYPE:LAYERS``, TF32 off, deterministic algorithms): the reads of
``transformers_reads.check_paths`` (3 questions on a shared document past the sliding window,
two lone prompts, 3 canvases: 14 rows), answered

* by a plain transformers forward of each row alone, and of 8 identical copies of it;
* by the reference engine path (``collated``: transformers' cache path) in one batch, twice, and
  each row alone;
* by the new path (packed + kernels, and each other path named in ``--paths``) in one batch and
  each row alone, once with its own routing and once with the routing *pinned* to the
  reference's (every router call returns the experts the reference's same call chose).

Every router call of the reference is recorded (top-k experts and the gap between the k-th and
the (k+1)-th expert's probability), so each other run counts the tokens whose expert set
differs (a *flip*). Near a tie, rounding alone flips an expert, and a flip is a discrete change
of the token's output. With pinned routing the paths compute the same function up to rounding,
so their difference must fall to float32 rounding: anything left would be a bug.

**profile** (``--profile-calls``, bf16): one fresh encoder call and decoder calls of the engine
at typical shapes under the torch profiler; kernel table and GPU-busy share.

    python bench/transformers_check.py --check float64:12,float32:30 --profile-calls
    python bench/transformers_check.py --config small --check float64   # CPU smoke
"""

from __future__ import annotations

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import argparse
import gc
import statistics
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache
from transformers_reads import PATHS, Reads, build_model, check_experts, make_reads, use_path

from app.inprocess import ReadModel
from app.inprocess.model import DecodeRow, KVEntry, PrefillJob

# -- routing ----------------------------------------------------------------------------------


@dataclass
class Routing:
    """Each router call's top-k experts: recorded (``record``), compared with the recorded call
    of the same number of the same router (``compare``), or replayed in place of the call's own
    (``replay``). Calls are counted per router: a path that skips a layer's feed-forward (the
    packed prefill skips the last encoder layer's) leaves the other routers' counts aligned."""

    mode: str = "off"
    calls: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = field(default_factory=dict)
    at: dict[int, int] = field(default_factory=dict)
    #: this call's compared tokens (None: all) and their tokens in the recorded call (None: same)
    tokens: torch.Tensor | None = None
    layout: torch.Tensor | None = None
    flips: list[torch.Tensor] = field(default_factory=list)  #: per compared call: (tokens,) bool
    flip_margins: list[float] = field(default_factory=list)  #: the recording's gap at a flip

    def install(self, model: ReadModel) -> None:
        routers = {id(m): m for m in model.model.modules()
                   if type(m).__name__.endswith("TextRouter")}
        for router in routers.values():
            router.forward = types.MethodType(self._route_with(), router)

    def start(self, mode: str) -> None:
        self.mode, self.at, self.tokens, self.layout = mode, {}, None, None
        if mode == "record":
            self.calls = {}
        self.flips, self.flip_margins = [], []

    def _route_with(self) -> Callable[..., Any]:
        routing = self

        def route(router: Any, hidden: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return routing.route(router, hidden)

        return route

    def route(self, router: Any, hidden: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The router's own arithmetic (norm, scale, softmax, top-k, renormalise, per-expert
        scale), with the top-k indices recorded, compared or replaced."""
        x = router.norm(hidden) * router.scale * router.scalar_root_size
        probs = torch.nn.functional.softmax(router.proj(x), dim=-1, dtype=torch.float32)
        k = int(router.config.top_k_experts)
        top = torch.topk(probs, k + 1, dim=-1)
        index = top.indices[:, :k]
        key, at = id(router), self.at.get(id(router), 0)
        if self.mode == "record":
            self.calls.setdefault(key, []).append((index, top.values[:, k - 1] - top.values[:, k]))
        elif self.mode in ("compare", "replay"):
            recorded, margin = self.calls[key][at]
            tokens = self.tokens if self.tokens is not None else torch.arange(index.shape[0])
            layout = self.layout if self.layout is not None else tokens
            recorded, margin = recorded[layout], margin[layout]
            flipped = (index[tokens].sort(-1).values != recorded.sort(-1).values).any(-1)
            self.flips.append(flipped)
            self.flip_margins.extend(margin[flipped].tolist())
            if self.mode == "replay":
                index = index.clone()
                index[tokens] = recorded
        self.at[key] = at + 1
        weights = probs.gather(1, index)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return probs, weights * router.per_expert_scale[index], index


# -- the reads --------------------------------------------------------------------------------




@dataclass
class Answer:
    """Per row: label log-probs (slots, labels) and final hidden states at the slots."""

    logprobs: list[torch.Tensor]
    hidden: list[torch.Tensor]


class Capture:
    """Keeps the slot hidden states ``ReadModel.slot_logits`` is given."""

    def __init__(self, model: ReadModel) -> None:
        self.seen: list[torch.Tensor] = []
        original = model.slot_logits

        def slot_logits(hidden: torch.Tensor) -> torch.Tensor:
            self.seen.append(hidden.detach().cpu())  # its own dtype: float64 differences show
            return original(hidden)

        model.slot_logits = slot_logits  # type: ignore[method-assign]


def engine_reads(model: ReadModel, reads: Reads, routing: Routing, capture: Capture,
                 *, alone: bool = False) -> Answer:
    """The engine's calls: the document, its 3 question suffixes (one call), the lone prompts
    (one call), then one decoder call over every row (or one per row)."""
    root = model.prefill([PrefillJob(None, reads.doc)])[0]
    collated_suffixes = _right_padded([len(s) for s in reads.suffixes])
    if model.packed:  # one row [s1 | s2 | s3]
        routing.tokens, routing.layout = None, collated_suffixes
    else:
        routing.tokens = routing.layout = collated_suffixes
    questions = model.prefill([PrefillJob(root, s) for s in reads.suffixes])
    lone = _right_padded([len(p) for p in reads.lone])
    if model.packed:  # one row [p1 | p2], no padding
        routing.tokens, routing.layout = None, lone
    else:
        routing.tokens = routing.layout = lone
    entries: list[KVEntry] = [*questions,
                              *model.prefill([PrefillJob(None, p) for p in reads.lone])]
    routing.tokens = routing.layout = None
    rows = [DecodeRow(entries[k], reads.canvases[c], reads.slots, reads.labels)
            for k, c in reads.plan]
    if model.packed and model.graphs:  # decoder rows padded to a layout
        routing.tokens, routing.layout = _fixed_layout_tokens(model, rows)
    capture.seen.clear()
    if alone:
        saved = routing.mode
        routing.mode = "off"  # a row alone has another token layout: its own routing
        results = [model.decode([row])[0] for row in rows]
        routing.mode = saved
        hidden = list(capture.seen)
    else:
        results = model.decode(rows)
        hidden = list(capture.seen[0].split(len(reads.slots)))
    return Answer([r.logprobs for r in results], hidden)


def _fixed_layout_tokens(model: ReadModel, rows: Sequence[DecodeRow]
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed-layout step's tokens of each row (row r at slot s of group g is decoder row
    g * slots + s), and the same tokens in a plain batch (row r is decoder row r)."""
    from app.inprocess.packed import group_rows, layout_for

    width = len(rows[0].canvas)
    layout = layout_for(model.kinds, [r.entry for r in rows], width)
    assert layout is not None
    groups, _ = group_rows([r.entry for r in rows])
    placed = [0] * len(rows)
    for g, members in enumerate(groups):
        for slot, row in enumerate(members):
            placed[row] = g * layout.slots + slot
    t = torch.arange(width)
    tokens = torch.cat([p * width + t for p in placed])
    return tokens, torch.cat([r * width + t for r in range(len(rows))])


def _right_padded(lengths: Sequence[int]) -> torch.Tensor:
    """The real tokens of a call of one right-padded row per prompt, flattened, in order."""
    width = max(lengths)
    return torch.tensor([j * width + t for j, n in enumerate(lengths) for t in range(n)])


def plain_reads(model: ReadModel, reads: Reads, copies: int) -> Answer:
    """transformers' own forward of each row's whole prompt and canvas, alone (``copies`` = 1)
    or as the first of ``copies`` identical rows."""
    use_path(model, "collated")
    logprobs, hidden = [], []
    for k, c in reads.plan:
        cache = DynamicCache(config=model.text_config)
        with torch.inference_mode():
            model.model.model.encoder(input_ids=torch.tensor(
                [list(reads.prompts[k])] * copies, device=model.device), cache=cache)
            states = model.model.model(cache=cache, decoder_input_ids=torch.tensor(
                [list(reads.canvases[c])] * copies, device=model.device)).last_hidden_state
            h = states[0, list(reads.slots)]
            lp = torch.log_softmax(model.slot_logits(h), -1)[:, list(reads.labels)]
        logprobs.append(lp.float().cpu())
        hidden.append(h.detach().cpu())
    return Answer(logprobs, hidden)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_rows(model: ReadModel, paths: Sequence[str], *, lean: bool = False) -> None:
    """Row by row: every path against the reference, with and without pinned routing, next to
    the reference's own noise (batching, the plain forward)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    model.graph_key_slots, model._steps = 16384, None  # the check's layouts need ~10k slots
    if model.model.config._experts_implementation == "eager":
        model.steps.capture = False  # the per-expert loop syncs the host: no CUDA graph
    reads = make_reads(model)
    routing = Routing()
    routing.install(model)
    capture = Capture(model)
    began = time.perf_counter()
    answers: dict[str, Answer] = {}
    flips: dict[str, tuple[list[int], int, list[float]]] = {}
    answers["plain"] = plain_reads(model, reads, 1)
    if not lean:
        answers["plain x8"] = plain_reads(model, reads, 8)
    use_path(model, "collated")
    routing.start("record")
    answers["ref"] = engine_reads(model, reads, routing, capture)
    routing.start("compare")
    answers["ref again"] = engine_reads(model, reads, routing, capture)
    routing.start("off")
    if not lean:
        answers["ref alone"] = engine_reads(model, reads, routing, capture, alone=True)
    for path in paths:
        use_path(model, path)
        for mode in ("compare", "replay"):
            routing.start(mode)
            name = path if mode == "compare" else f"{path} pinned"
            answers[name] = engine_reads(model, reads, routing, capture)
            n = int(model.text_config.num_hidden_layers)
            decoder = torch.stack(routing.flips[-n:]).view(n, len(reads.plan), -1)
            flips[name] = (decoder.sum((0, 2)).tolist(),
                           sum(int(f.sum()) for f in routing.flips[:-n]), routing.flip_margins)
        routing.start("off")
        if not lean:
            answers[f"{path} alone"] = engine_reads(model, reads, routing, capture,
                                                    alone=True)
    use_path(model, "collated")
    routing.start("off")
    n_layers = model.text_config.num_hidden_layers
    print(f"{model.model.dtype} check, {n_layers} layers, hidden "
          f"{model.text_config.hidden_size}, TF32 off, "
          f"deterministic algorithms; {len(reads.plan)} rows (prompt tokens "
          f"{[len(reads.prompts[k]) for k, _ in reads.plan]}); "
          f"{time.perf_counter() - began:.0f}s", flush=True)
    pairs = [("plain x8", "plain"), ("ref", "plain"), ("ref again", "ref"),
             ("ref alone", "ref")]
    for path in paths:
        pairs += [(path, "ref"), (f"{path} pinned", "ref"), (f"{path} alone", path),
                  (f"{path} alone", "ref alone")]
    print(f"{'':<34}{'max |dlp|':>10}{'max rel h':>10}  per row: max |dlogprob| over its "
          "slots x labels")
    for a, b in pairs:
        if a not in answers or b not in answers:
            continue
        dlp = [float((x - y).abs().max())
               for x, y in zip(answers[a].logprobs, answers[b].logprobs, strict=True)]
        rel = [_rel(x, y) for x, y in zip(answers[a].hidden, answers[b].hidden, strict=True)]
        print(f"{a + ' vs ' + b:<34}{max(dlp):>10.1e}{max(rel):>10.1e}  "
              + " ".join(f"{d:.0e}" for d in dlp))
    all_margins = torch.cat([m for calls in routing.calls.values() for _, m in calls])
    print(f"reference routing: {int(all_margins.numel())} token-layer choices (pads included); "
          f"gap between the k-th and (k+1)-th expert's probability: median "
          f"{float(all_margins.median()):.1e}, min {float(all_margins.min()):.1e}")
    for name, (rows, encoder, margins) in flips.items():
        gap = (f"the reference's gap there: max {max(margins):.1e}, median "
               f"{statistics.median(margins):.1e}" if margins else "none")
        print(f"{name}: tokens whose expert set differs from the reference's (real tokens; "
              f"pinned: before pinning): encoder {encoder}, decoder per row {rows}; {gap}")
    same = all(torch.equal(x, y) for x, y in zip(answers["ref"].logprobs,
                                                  answers["ref again"].logprobs, strict=True))
    print(f"ref vs ref again bit-identical: {same}", flush=True)


def _norms_in_dtype() -> Callable[[], None]:
    """transformers' RMSNorm computes in float32 whatever the model's dtype; the kernels' fused
    norm computes in the model's. For a float64 comparison of the two, the reference's norms in
    the model's dtype too (the same formula); returns the undo."""
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import (
        DiffusionGemmaRMSNorm,
    )

    from app.inprocess.kernels import norm_eps

    original = DiffusionGemmaRMSNorm.forward

    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        mean_squared = hidden_states.pow(2).mean(-1, keepdim=True) + norm_eps(self)
        normed = hidden_states * torch.pow(mean_squared, -0.5)
        return normed * self.weight if self.with_scale else normed

    DiffusionGemmaRMSNorm.forward = forward  # type: ignore[method-assign]

    def restore() -> None:
        DiffusionGemmaRMSNorm.forward = original  # type: ignore[method-assign]

    return restore


# -- call profiles ----------------------------------------------------------------------------


def _sync(model: ReadModel) -> None:
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)


def _kernel_table(prof: Any, label: str, wall_s: float, out: Path | None) -> None:
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    total = max(sum(e.self_device_time_total for e in events) / 1e6, 1e-9)
    events.sort(key=lambda e: -e.self_device_time_total)
    launches = sum(e.count for e in events)
    lines = [f"{label}: wall {wall_s * 1e3:.1f} ms, GPU busy {total * 1e3:.1f} ms "
             f"({100 * total / wall_s:.0f}%), {launches} kernels"]
    for e in events[:25]:
        share = 100 * e.self_device_time_total / 1e6 / total
        lines.append(f"  {share:5.1f}% {e.self_device_time_total / 1e3:9.2f} ms {e.count:6d}x "
                     f"{e.key[:110]}")
    text = "\n".join(lines)
    print(text, flush=True)
    if out is not None:
        with out.open("a") as f:
            f.write(text + "\n")


def profile_calls(model: ReadModel, out: Path | None, *, decode_batches: Sequence[int] = (16, 64),
                  prompt: int = 460, prefill_rows: int = 34) -> None:
    """A fresh encoder call of ``prefill_rows`` prompts of ``prompt`` tokens (with and without
    the kernels) and decoder calls of 16-token canvases over as many distinct prompts (eager
    packed steps and CUDA-graph steps), each timed and profiled; graph replays against the same
    steps run eagerly."""
    from torch.profiler import ProfilerActivity, profile

    gen = torch.Generator().manual_seed(11)

    def ids(n: int) -> tuple[int, ...]:
        return tuple(torch.randint(200, model.vocab_size, (n,), generator=gen).tolist())

    jobs = [PrefillJob(None, ids(prompt)) for _ in range(prefill_rows)]
    for path in ("packed", "kernels"):
        use_path(model, path)
        for _ in range(2):
            model.prefill(jobs)
        started = time.perf_counter()
        for _ in range(3):
            model.prefill(jobs)
        wall = (time.perf_counter() - started) / 3
        print(f"prefill {prefill_rows} x {prompt} tokens, {path}: {wall * 1e3:.1f} ms, "
              f"{prefill_rows * prompt / wall:.0f} tokens/s", flush=True)
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        model.prefill(jobs)
    _kernel_table(prof, f"prefill {prefill_rows} x {prompt} tokens (kernels)", wall, out)
    entries = model.prefill([PrefillJob(None, ids(prompt)) for _ in range(max(decode_batches))])
    canvas = ids(16)
    for batch in decode_batches:
        rows = [DecodeRow(e, canvas, (0, 5), (3, 7)) for e in entries[:batch]]
        for path in ("kernels", "graphs"):
            use_path(model, path)
            for _ in range(2):
                model.decode(rows)
            _sync(model)
            started = time.perf_counter()
            for _ in range(5):
                model.decode(rows)
            _sync(model)
            wall = (time.perf_counter() - started) / 5
            print(f"decode B={batch}, {path}: {wall * 1e3:.1f} ms", flush=True)
            with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
                model.decode(rows)
            _kernel_table(prof, f"decode B={batch} over {prompt}-token prompts, {path}", wall,
                          out)
        steps = model.steps
        graphed = model.decode(rows)
        saved = {layout: step.graph for layout, step in steps.steps.items()}
        steps.capture = False
        for step in steps.steps.values():
            step.graph = None
        eager = model.decode(rows)
        for layout, graph in saved.items():
            steps.steps[layout].graph = graph
        steps.capture = True
        same = all(torch.equal(a.logprobs, b.logprobs) for a, b in zip(graphed, eager,
                                                                       strict=True))
        print(f"decode B={batch}: graph replay vs the same step run eagerly: bit-identical "
              f"{same}, max |dlogprob| "
              f"{max(float((a.logprobs - b.logprobs).abs().max()) for a, b in zip(graphed, eager, strict=True)):.1e}; "  # noqa: E501
              f"{steps.captured} graphs captured in {steps.capture_s:.1f}s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=("full", "small"), default="full")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--check", default="", help="comma-separated DTYPE[:LAYERS] of the "
                        "row-by-row check (e.g. float64:12,float32:30); '' for none")
    parser.add_argument("--lean", action="store_true",
                        help="leave out the batch-of-8 plain reads and the rows read alone")
    parser.add_argument("--norms-in-dtype", action="store_true",
                        help="the reference's RMSNorm in the model's dtype (not float32)")
    parser.add_argument("--then-float32", action="store_true",
                        help="after a float64 check, the same model again in float32")
    parser.add_argument("--paths", default="packed,kernels",
                        help=f"compared with collated: {list(PATHS)}")
    parser.add_argument("--profile-calls", action="store_true")
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    args = parser.parse_args()
    out = Path(args.out) / "calls.txt" if args.out else None
    for spec in filter(None, args.check.split(",")):
        dtype_name, _, layers = spec.partition(":")
        dtype = getattr(torch, dtype_name)
        began = time.perf_counter()
        model = build_model(args.config, args.device, dtype=dtype, layers=int(layers or 30))
        print(f"{dtype_name} model: {model.text_config.num_hidden_layers} layers, built in "
              f"{time.perf_counter() - began:.0f}s", flush=True)
        if dtype == torch.float64:
            # grouped_mm has no float64 kernel: the per-expert loop on every path, whose host
            # synchronisations no CUDA graph can hold: fixed-layout steps run eagerly
            model.model.set_experts_implementation("eager")
        restore = _norms_in_dtype() if args.norms_in_dtype else None
        check_rows(model, args.paths.split(","), lean=args.lean)
        if restore is not None:
            restore()
        if dtype == torch.float64 and args.then_float32:
            model.model.to(torch.float32)  # the same weights, rounded: float32's own noise
            check_rows(model, args.paths.split(","))
        if dtype != torch.float64:
            check_experts(model)
        del model
        gc.collect()
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        torch.use_deterministic_algorithms(False)
    if args.profile_calls:
        model = build_model(args.config, args.device)
        profile_calls(model, out)


if __name__ == "__main__":
    main()
