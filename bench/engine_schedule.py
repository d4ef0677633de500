"""How much of the in-process engine's wall time its runner leaves the GPU idle, on this
machine's CPU, without a GPU.

Everything around the forward is the product's own: the field decisions of
``bench/transformers_reads.py`` (the same states and prompt lengths, the real-vocabulary
tokenizer), ``plan_decision``, ``DecisionFlow`` and ``drive``, ``TransformersUpstream.read``
(validation, the chat template, tokenization), its micro-batcher and ``execute_run``'s schedule
(``--workers`` chunks of ``--chunk`` decisions). Only the batch's forward is a stand-in: it
sleeps, releasing the GIL as a GPU's work does, for ``--ms-per-read`` a read plus
``--ms-per-batch`` a batch, and answers every read with one real read's output. The defaults
are the H200's figures for the field at one draw with FP8 (about 380 ms of GPU for a batch of
64 reads: 10 s of encoder and 1.3 s of decoder over 33 batches).

The figure is the GPU's idle share: 1 - (the stand-in's sleeps / the wall). It is the part of
the H200's "outside%" that the CPU's side of the runner causes (planning, tokenizing, batching
and handing results back while no batch runs).

    python bench/engine_schedule.py                                  # the default schedule
    python bench/engine_schedule.py --workers 8 --chunk 16           # 128 decisions in flight
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine import DecisionFlow, PolicyName, ReadSettings, plan_decision  # noqa: E402
from app.inprocess import (  # noqa: E402
    ReadModel,
    TransformersUpstream,
    build_tiny_model,
)
from app.inprocess.executor import JobOutput, ReadJob  # noqa: E402
from app.inprocess.tiny import rounded_vocab  # noqa: E402
from app.tokenizer.hf import load_tokenizer  # noqa: E402
from bench.transformers_reads import (  # noqa: E402
    add_schedule_options,
    field_decisions,
    run_decisions,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", default=str(ROOT.parent / "shared" / "tokenizers" /
                                                   "diffusiongemma-approx"))
    parser.add_argument("--states", type=int, default=1056)
    parser.add_argument("--draws", type=int, default=1)
    add_schedule_options(parser)
    parser.add_argument("--ms-per-read", type=float, default=5.5)
    parser.add_argument("--ms-per-batch", type=float, default=28.0)
    args = parser.parse_args()

    tokenizer = load_tokenizer(args.tokenizer)
    decisions = field_decisions(args.states, tokenizer)
    settings = ReadSettings(policy=PolicyName.FIXED, fixed_draws=args.draws, canvas_length=256)
    model = ReadModel(build_tiny_model(rounded_vocab(tokenizer.info.vocab_size), layers=1))
    upstream = TransformersUpstream.from_model(model, tokenizer=tokenizer, name="schedule",
                                               max_batch=args.max_batch, flush_ms=args.flush_ms)
    first = DecisionFlow(plan_decision(decisions[0], settings, tokenizer), settings,
                         vocab_size=tokenizer.info.vocab_size).next_requests()[0]
    template = upstream.executor.run([upstream.job_for(first)])[0]  # answers every read
    slept = [0.0]

    def stand_in(jobs: Sequence[ReadJob]) -> list[JobOutput]:
        seconds = (args.ms_per_read * len(jobs) + args.ms_per_batch) / 1000.0
        time.sleep(seconds)
        slept[0] += seconds
        return [template] * len(jobs)

    upstream.executor.run = stand_in  # type: ignore[method-assign]
    started = time.perf_counter()
    asyncio.run(run_decisions(upstream, decisions, settings, tokenizer, workers=args.workers,
                               chunk=args.chunk, in_flight=args.in_flight))
    wall = time.perf_counter() - started
    sizes = upstream.batcher.batch_sizes
    upstream.batcher.close()
    print(f"{len(decisions)} field decisions x {args.draws} draw(s), {args.workers} x "
          f"{args.chunk} in flight, max batch {args.max_batch}: wall {wall:.2f} s, stand-in "
          f"forwards {slept[0]:.2f} s, GPU idle {1 - slept[0] / wall:.0%}, "
          f"{len(decisions) / wall:.1f} decisions/s ({len(decisions) / slept[0]:.1f} with no "
          f"idle), {len(sizes)} batches of {sum(sizes) / max(len(sizes), 1):.1f} reads")


if __name__ == "__main__":
    main()
