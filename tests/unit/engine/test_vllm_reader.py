"""The vllm layout reproduces vLLM 0.33's own reader token for token.

``vllm_reads`` below builds, straight from the facts of protocol.md section 10 and with the
Hugging Face tokenizer itself (not dreads' adapter), the reads vLLM's ``/v1/systemone`` would
run for a state and its questions. dreads' draw 0 under the vllm layout must send exactly those
prompt ids, seed canvas, canvas length, ``max_tokens`` and logprob ids, on both endpoints.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
from typing import Any

import pytest

from app.engine import (
    DecisionFlow,
    Endpoint,
    PolicyName,
    ReadMode,
    ReadRequest,
    ReadSettings,
    parse_decision,
    plan_decision,
)
from app.engine.vllm_reader import joint_spans
from app.errors import TemplateError
from app.tokenizer.hf import HFTextTokenizer

THOUGHT = "<|channel>thought\n<channel|>"
STATE = "Clause 4.2: the Supplier delivers within 30 days. Clause 9.1: delivery takes 45 days."
REPLY = {"noul": "Answer with yes or no only.",
         "choice": "Answer with the letter of one option only.",
         "score": "Answer with the number of one level only."}


# -- vLLM's reader, from the protocol's facts --------------------------------------------------

def _labels(spec: dict[str, Any]) -> list[str]:
    if spec["type"] == "noul":
        return ["yes", "no"]
    if spec["type"] == "choice":
        return list(string.ascii_uppercase[:len(spec["criteria"])])
    return [str(i) for i in range(len(spec["criteria"]))]


def _option_lines(spec: dict[str, Any]) -> list[str]:
    if spec["type"] == "noul":
        crit = spec.get("criteria") or {}
        return [f"yes: {crit['true']}" if crit.get("true") else "yes",
                f"no: {crit['false']}" if crit.get("false") else "no"]
    if spec["type"] == "choice":
        return [f"{label}: {name} - {desc}" if desc else f"{label}: {name}"
                for label, (name, desc) in zip(_labels(spec), spec["criteria"].items(),
                                               strict=True)]
    return [f"{i}: {level}" for i, level in enumerate(spec["criteria"])]


def _body(spec: dict[str, Any]) -> str:
    return "\n".join([*_option_lines(spec), REPLY[spec["type"]]])


def _prompt(hf: Any, content: str) -> list[int]:
    return list(hf.apply_chat_template([{"role": "user", "content": content}],
                                       add_generation_prompt=True, enable_thinking=False,
                                       tokenize=True, return_dict=False))


def _noise(prompt: list[int], n: int, vocab: int) -> list[int]:
    rng = random.Random(hashlib.sha256(json.dumps(prompt).encode()).digest())
    return [rng.randrange(vocab) for _ in range(n)]


def _isolated(hf: Any, spec: dict[str, Any]) -> dict[str, Any]:
    encode = lambda text: hf.encode(text, add_special_tokens=False)  # noqa: E731
    ask = f"Question: {spec['instructions']}\n{_body(spec)}" if spec.get("instructions") \
        else _body(spec)
    prompt = _prompt(hf, f"{STATE}\n\n{ask}")
    label_ids = []
    for label in _labels(spec):
        (token,) = encode(label)
        label_ids.append(token)
    canvas = [_noise(prompt, 1, len(hf))[0], hf.convert_tokens_to_ids("<turn|>")]
    canvas += [hf.pad_token_id] * (16 - len(canvas))
    return {"prompt": prompt + encode(THOUGHT), "canvas": canvas, "width": 16,
            "logprob_ids": label_ids, "max_tokens": 2}


def _joint_read(hf: Any, specs: list[dict[str, Any]], start: int,
                served: int) -> dict[str, Any]:
    encode = lambda text: hf.encode(text, add_special_tokens=False)  # noqa: E731
    asks = []
    for k, spec in enumerate(specs, start):
        head = f"Question {k}: {spec['instructions']}" if spec.get("instructions") \
            else f"Question {k}:"
        asks.append(f"{head}\n{_body(spec)}")
    content = (f"{STATE}\n\n" + "\n\n".join(asks) + "\n\nReply with one line per question, in "
               'order, formatted as "number: answer".')
    prompt = _prompt(hf, content)
    noise = iter(_noise(prompt, len(specs), len(hf)))
    canvas: list[int] = []
    wanted: set[int] = set()
    for k, spec in enumerate(specs, start):
        labels = _labels(spec)
        canvas += encode(f"{k}: {labels[0]}")[:-1]
        for label in labels:  # its answer-line id and its first-token id
            wanted |= {encode(f"{k}: {label}")[-1], encode(label)[0]}
        last_slot = len(canvas)
        canvas += [next(noise), *encode("\n")]
    canvas.append(hf.convert_tokens_to_ids("<turn|>"))
    width = min(-(-(len(canvas) + 1) // 16) * 16, served)
    canvas += [hf.pad_token_id] * (width - len(canvas))
    return {"prompt": prompt + encode(THOUGHT), "canvas": canvas, "width": width,
            "logprob_ids": sorted(wanted), "max_tokens": last_slot + 1}


def vllm_reads(hf: Any, specs: list[dict[str, Any]], *, joint: bool,
               served: int = 320) -> list[dict[str, Any]]:
    """The reads vLLM's /v1/systemone runs for these questions about STATE."""
    if not joint or len(specs) == 1:
        return [_isolated(hf, spec) for spec in specs]
    encode = lambda text: hf.encode(text, add_special_tokens=False)  # noqa: E731
    rows = [len(encode(f"{k}: {_labels(s)[0]}")[:-1]) + 2 for k, s in enumerate(specs, 1)]
    return [_joint_read(hf, specs[a:b], a + 1, served) for a, b in joint_spans(rows, served)]


# -- dreads' draw 0 -------------------------------------------------------------------------

def dreads_reads(tok: HFTextTokenizer, specs: list[dict[str, Any]], *, joint: bool,
                 endpoint: Endpoint = Endpoint.COMPLETIONS,
                 canvas: int = 320) -> list[ReadRequest]:
    settings = ReadSettings(model="dgemma", tokenizer=tok.name, canvas_length=canvas,
                            read_mode=ReadMode.JOINT if joint else ReadMode.ISOLATED,
                            endpoint=endpoint)
    decision = parse_decision({"id": "d", "state": STATE,
                               "questions": {f"x{i}": s for i, s in enumerate(specs)}})
    plan = plan_decision(decision, settings, tok, max_model_len=8192)
    return DecisionFlow(plan, settings, vocab_size=tok.info.vocab_size).next_requests()


def noul(i: int) -> dict[str, Any]:
    return {"type": "noul", "instructions": f"Does clause {i} contradict the other one?"}


def choice(n: int, i: int = 0) -> dict[str, Any]:
    names = [f"party {k}" for k in range(n)]
    return {"type": "choice", "instructions": f"Who delivers ({i})?",
            "criteria": {name: (f"described {k}" if k % 2 else None)
                         for k, name in enumerate(names)}}


def score(n: int, i: int = 0) -> dict[str, Any]:
    return {"type": "score", "instructions": f"How risky is it ({i})?",
            "criteria": [f"level {k}" for k in range(n)]}


ISOLATED = {
    "noul": [noul(1)],
    "noul with criteria": [{"type": "noul", "criteria": {"true": "they conflict"}}],
    "choice of 2": [choice(2)],
    "choice of 26": [choice(26)],
    "score of 2": [score(2)],
    "score of 10": [score(10)],
}
JOINT = {
    "1 question": [noul(1)],
    "6 questions": [noul(1), choice(3), score(5), noul(2), choice(26), score(10)],
    "24 questions": [[noul(i), choice(4, i), score(7, i)][i % 3] for i in range(24)],
}


def check_same(request: ReadRequest, expected: dict[str, Any]) -> None:
    body = request.body
    xargs = body["vllm_xargs"]
    assert body["prompt"] == expected["prompt"]
    assert xargs["diffusion_seed_canvas"] == expected["canvas"]
    assert xargs["diffusion_canvas_length"] == expected["width"]
    assert body["logprob_token_ids"] == expected["logprob_ids"]
    assert body["max_tokens"] == expected["max_tokens"]
    assert xargs["diffusion_max_steps"] == 1 and xargs["diffusion_read_only"] is True


@pytest.mark.parametrize("case", list(ISOLATED))
def test_isolated_draw_zero_is_vllms_read(approx_tokenizer: HFTextTokenizer, case: str) -> None:
    specs = ISOLATED[case]
    requests = dreads_reads(approx_tokenizer, specs, joint=False)
    expected = vllm_reads(approx_tokenizer.hf, specs, joint=False)
    assert len(requests) == len(expected) == 1
    check_same(requests[0], expected[0])


@pytest.mark.parametrize("case", list(JOINT))
def test_joint_draw_zero_is_vllms_read(approx_tokenizer: HFTextTokenizer, case: str) -> None:
    specs = JOINT[case]
    requests = dreads_reads(approx_tokenizer, specs, joint=True)
    expected = vllm_reads(approx_tokenizer.hf, specs, joint=True)
    assert len(requests) == len(expected)
    for request, read in zip(requests, expected, strict=True):
        check_same(request, read)


def test_joint_reads_split_as_vllm_splits_them(approx_tokenizer: HFTextTokenizer) -> None:
    """24 questions on a 64-wide canvas: the fewest even runs that leave a pad row."""
    specs = JOINT["24 questions"]
    requests = dreads_reads(approx_tokenizer, specs, joint=True, canvas=64)
    expected = vllm_reads(approx_tokenizer.hf, specs, joint=True, served=64)
    assert len(requests) == len(expected) > 1
    for request, read in zip(requests, expected, strict=True):
        check_same(request, read)


@pytest.mark.parametrize("joint", [False, True])
def test_chat_reads_render_the_same_prompt(approx_tokenizer: HFTextTokenizer,
                                           joint: bool) -> None:
    """On chat the server renders the messages and continues the assistant prefill: the prompt
    it runs is vLLM's, thought block included."""
    specs = JOINT["6 questions"]
    expected = vllm_reads(approx_tokenizer.hf, specs, joint=joint)
    requests = dreads_reads(approx_tokenizer, specs, joint=joint, endpoint=Endpoint.CHAT)
    for request, read in zip(requests, expected, strict=True):
        body = request.body
        rendered = approx_tokenizer.hf.apply_chat_template(
            body["messages"], add_generation_prompt=body["add_generation_prompt"],
            continue_final_message=body["continue_final_message"],
            **body["chat_template_kwargs"], tokenize=True, return_dict=False)
        assert list(rendered) == read["prompt"]
        assert body["vllm_xargs"]["diffusion_seed_canvas"] == read["canvas"]


def test_labels_are_the_replys_first_tokens(approx_tokenizer: HFTextTokenizer) -> None:
    (request,) = dreads_reads(approx_tokenizer, [noul(1)], joint=False)
    assert request.body["logprob_token_ids"] == [4443, 1904]  # "yes", "no": no leading space


def test_later_draws_change_only_the_slot_noise(approx_tokenizer: HFTextTokenizer) -> None:
    settings = ReadSettings(tokenizer=approx_tokenizer.name, read_mode=ReadMode.JOINT,
                            policy=PolicyName.FIXED, fixed_draws=4)
    decision = parse_decision({"id": "d", "state": STATE, "questions": {
        f"x{i}": s for i, s in enumerate(JOINT["6 questions"])}})
    plan = plan_decision(decision, settings, approx_tokenizer)
    unit = plan.units[0]
    flow = DecisionFlow(plan, settings, vocab_size=approx_tokenizer.info.vocab_size)
    first = flow.next_requests()[0]
    canvases = [first.body["vllm_xargs"]["diffusion_seed_canvas"]]
    slots = {s.position for s in unit.slots}
    for draw in range(1, 4):
        later = _next_draw(flow, plan)
        assert {k: v for k, v in later.body.items() if k != "vllm_xargs"} == \
            {k: v for k, v in first.body.items() if k != "vllm_xargs"}
        canvas = later.body["vllm_xargs"]["diffusion_seed_canvas"]
        assert [c for p, c in enumerate(canvas) if p not in slots] == \
            [c for p, c in enumerate(canvases[0]) if p not in slots]
        assert later.draw == draw
        canvases.append(canvas)
    assert len({tuple(c) for c in canvases}) == 4


def _next_draw(flow: DecisionFlow, plan: Any) -> ReadRequest:
    """Record an undecided read of the outstanding draw; return the next draw's request."""
    from app.engine import ReadResult, SlotRow

    (request,) = flow.next_requests()
    rows = {}
    for slot in plan.units[0].slots:
        ids = [*slot.label_ids, *(i for also in slot.also_ids for i in also)]
        rows[slot.position] = SlotRow({i: -2.0 - 0.01 * request.draw * (n % 2)
                                       for n, i in enumerate(ids)}, ids[0], -2.0)
    flow.record(request, ReadResult(rows=rows))
    (later,) = flow.next_requests()
    return later


def test_another_seed_or_replicate_draws_other_noise(approx_tokenizer: HFTextTokenizer) -> None:
    decision = parse_decision({"id": "d", "state": STATE, "questions": {"x": noul(1)}})
    settings = ReadSettings(tokenizer=approx_tokenizer.name)
    plan = plan_decision(decision, settings, approx_tokenizer)
    vocab = approx_tokenizer.info.vocab_size
    base = DecisionFlow(plan, settings, vocab_size=vocab).next_requests()[0]
    other_replicate = DecisionFlow(plan, settings, vocab_size=vocab,
                                   replicate=1).next_requests()[0]
    seeded = ReadSettings(tokenizer=approx_tokenizer.name, seed=7)
    other_seed = DecisionFlow(plan_decision(decision, seeded, approx_tokenizer), seeded,
                              vocab_size=vocab).next_requests()[0]
    noise = {r.body["vllm_xargs"]["diffusion_seed_canvas"][0]
             for r in (base, other_replicate, other_seed)}
    assert len(noise) == 3


def test_more_than_ten_score_levels_are_refused(approx_tokenizer: HFTextTokenizer) -> None:
    with pytest.raises(TemplateError, match=r"at most 10 levels.*--layout document_first"):
        dreads_reads(approx_tokenizer, [score(11)], joint=False)
