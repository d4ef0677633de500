"""Answer template, slot resolution and its rejections, canvas width, read plans of dreads' own
layouts (document first, reference); the vllm layout has ``test_vllm_reader.py``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app.engine import (
    Decision,
    Endpoint,
    Layout,
    Question,
    ReadMode,
    ReadSettings,
    answer_lines,
    canvas_width,
    parse_decision,
    plan_decision,
)
from app.engine.template import PromptTooLong, resolve_slots
from app.errors import ConfigError, TemplateError
from app.tokenizer.hf import HFTextTokenizer


def doc(**over: Any) -> ReadSettings:
    """dreads' document-first layout (the vllm layout is the default)."""
    return ReadSettings(layout=Layout.DOCUMENT_FIRST, **over)


NOUL = {"type": "noul", "instructions": "Conflict?"}
CHOICE3 = {"type": "choice", "instructions": "Who?", "criteria": {"a": None, "b": None, "c": None}}


def make(questions: dict[str, Any]) -> Decision:
    return parse_decision({"id": "d1", "state": "Some state.", "questions": questions})


def odd_question(labels: tuple[str, ...], qid: str = "X3|C1|conflict") -> Decision:
    q = Question(id=qid, type="choice", instructions="?", labels=labels,
                 options=labels, descriptions=(None,) * len(labels))
    return Decision(id="d1", state="s", questions=(q,))


@pytest.mark.parametrize(("ids", "labels", "fmt", "text"), [
    (["q0"], ["yes"], "lines", "q0: yes"),
    (["q0", "q1"], ["yes", "no"], "lines", "q0: yes\nq1: no"),
    (["q0", "q1"], ["yes", "B"], "indexed", "q0yes q1B"),
])
def test_answer_lines(ids: list[str], labels: list[str], fmt: str, text: str) -> None:
    assert answer_lines(ids, labels, fmt=fmt) == text


@pytest.mark.parametrize(("n", "step", "cap", "width"), [
    (1, 16, 320, 16), (16, 16, 320, 16), (17, 16, 320, 32), (320, 16, 320, 320),
    (321, 16, 320, None), (295, 16, 300, 300), (5, 4, 4, None),
])
def test_canvas_width(n: int, step: int, cap: int, width: int | None) -> None:
    assert canvas_width(n, step=step, cap=cap) == width


def tokens(tok: HFTextTokenizer, ids: Any) -> list[str]:
    return list(tok.hf.convert_ids_to_tokens(list(ids)))


def test_isolated_plan_with_scaffold_in_prompt(standin_tokenizer: HFTextTokenizer) -> None:
    d = make({"n": NOUL, "c": CHOICE3})
    plan = plan_decision(d, doc(), standin_tokenizer)
    assert [u.question_indices for u in plan.units] == [(0,), (1,)]
    noul, choice = plan.units
    info = standin_tokenizer.info
    assert tokens(standin_tokenizer, noul.template_ids[:4]) == ["q", "0", ":", "▁yes"]
    assert noul.template_ids[4] == info.turn_close_id
    assert set(noul.template_ids[5:]) == {info.pad_id} and noul.width == 16
    assert noul.slots[0].position == 3 and noul.slots[0].canvas_id == "q0"
    assert noul.max_tokens == 6
    assert tokens(standin_tokenizer, noul.slots[0].label_ids) == ["▁yes", "▁no"]
    assert tokens(standin_tokenizer, choice.slots[0].label_ids) == ["▁A", "▁B", "▁C"]
    assert choice.logprob_ids == tuple(sorted(choice.slots[0].label_ids))
    # the template writes the thought block already: the prompt is the rendered one, as is
    assert noul.prompt_ids == tuple(standin_tokenizer.chat_prompt_ids(noul.messages))
    assert noul.prefill == ""


def test_the_thought_block_goes_in_the_prompt_never_the_canvas(
        thoughtless_tokenizer: HFTextTokenizer) -> None:
    """A template that does not write the thought block: dreads appends it to the prompt (by
    ids, and on chat by an assistant prefill the server continues), never to the canvas."""
    tok = thoughtless_tokenizer
    scaffold = tok.info.scaffold_ids
    for endpoint in Endpoint:
        unit = plan_decision(make({"n": NOUL}), doc(endpoint=endpoint), tok).units[0]
        assert not set(scaffold) & set(unit.template_ids)
        assert unit.slots[0].position == 3
        assert unit.prompt_ids == (*tok.chat_prompt_ids(unit.messages), *scaffold)
        assert unit.prefill == (tok.info.scaffold_text if endpoint == Endpoint.CHAT else "")
        if unit.prefill:
            continued = tok.chat_prompt_ids(unit.messages, prefill=unit.prefill)
            assert tuple(continued[-len(scaffold):]) == scaffold


def test_chat_refused_when_the_template_cannot_continue_a_message(
        thoughtless_tokenizer: HFTextTokenizer) -> None:
    tok = HFTextTokenizer(thoughtless_tokenizer.hf, "no-continuation")
    tok.info = dataclasses.replace(thoughtless_tokenizer.info, reply_prefix=None)
    with pytest.raises(ConfigError, match="--endpoint completions"):
        plan_decision(make({"n": NOUL}), doc(), tok)
    unit = plan_decision(make({"n": NOUL}), doc(endpoint=Endpoint.COMPLETIONS), tok).units[0]
    assert unit.prompt_ids[-len(tok.info.scaffold_ids):] == tok.info.scaffold_ids


def test_completions_plan_carries_prompt_ids(standin_tokenizer: HFTextTokenizer) -> None:
    settings = doc(endpoint=Endpoint.COMPLETIONS)
    unit = plan_decision(make({"n": NOUL}), settings, standin_tokenizer).units[0]
    assert unit.prompt_ids == tuple(standin_tokenizer.chat_prompt_ids(unit.messages))
    assert unit.prompt_ids[-len(standin_tokenizer.info.scaffold_ids):] == \
        standin_tokenizer.info.scaffold_ids


def test_every_canvas_keeps_a_pad_row(standin_tokenizer: HFTextTokenizer) -> None:
    """Content that fills a step exactly gets one more step: a pad row after the turn close."""
    d = make({f"q-{i}": NOUL for i in range(4)})  # 4 lines "qK: ▁yes\n" = 19 ids + turn close
    for settings in (doc(read_mode=ReadMode.JOINT), doc(read_mode=ReadMode.JOINT, canvas_step=4)):
        (unit,) = plan_decision(d, settings, standin_tokenizer).units
        close = unit.template_ids.index(standin_tokenizer.info.turn_close_id)
        assert close < unit.width - 1
        assert unit.template_ids[close + 1] == standin_tokenizer.info.pad_id


def test_a_prompt_too_long_for_the_server_is_refused(standin_tokenizer: HFTextTokenizer) -> None:
    d = make({"X3|C1|conflict": NOUL})
    unit = plan_decision(d, doc(), standin_tokenizer).units[0]
    need = len(unit.prompt_ids) + unit.width
    assert plan_decision(d, doc(), standin_tokenizer, max_model_len=need).units
    with pytest.raises(PromptTooLong) as err:
        plan_decision(d, doc(), standin_tokenizer, max_model_len=need - 1)
    assert err.value.message.startswith(
        f"the prompt of question(s) 'X3|C1|conflict' is {len(unit.prompt_ids)} tokens (thought "
        f"block included) and its canvas {unit.width}: {need} tokens, more than the server's "
        f"max_model_len {need - 1}")


def test_trivial_questions_get_no_unit(standin_tokenizer: HFTextTokenizer) -> None:
    d = make({"one": {"type": "choice", "instructions": "?", "criteria": {"only": None}},
              "n": NOUL})
    plan = plan_decision(d, doc(), standin_tokenizer)
    assert plan.trivial == (0,) and [u.question_indices for u in plan.units] == [(1,)]


@pytest.mark.parametrize(("labels", "needle"), [
    (("yes", "maybe"), "label 'maybe' of question 'X3|C1|conflict' is 4 tokens in the answer "
                       "template; labels must be single tokens: use yes/no, A-Z or 1-9"),
    (("maybe", "yes"), "label 'maybe' of question 'X3|C1|conflict' is 4 tokens"),
    (("ab", "cd"), "label 'cd' of question 'X3|C1|conflict' changes 2 positions"),
    (("ab", "ad", "cb"), "labels 'ab' and 'cb' of question 'X3|C1|conflict' land on different "
                         "positions"),
    (("yes", "yes"), "changes 0 positions"),
])
def test_unreadable_labels_are_rejected(standin_tokenizer: HFTextTokenizer,
                                        labels: tuple[str, ...], needle: str) -> None:
    with pytest.raises(TemplateError) as err:
        plan_decision(odd_question(labels), doc(), standin_tokenizer)
    assert needle in err.value.message


def test_too_wide_is_rejected_in_isolated_mode(standin_tokenizer: HFTextTokenizer) -> None:
    settings = doc(canvas_length=4, canvas_step=4)
    with pytest.raises(TemplateError) as err:
        plan_decision(make({"X3|C1|conflict": NOUL}), settings, standin_tokenizer)
    assert err.value.message.startswith("the answer template of question(s) 'X3|C1|conflict' "
                                        "needs 6 canvas positions with the turn close and a pad "
                                        "row, more than the canvas length 4")


def test_too_many_logprob_ids_is_rejected(standin_tokenizer: HFTextTokenizer) -> None:
    with pytest.raises(TemplateError) as err:
        plan_decision(make({"who": CHOICE3}), doc(max_logprob_ids=2), standin_tokenizer)
    assert "question(s) 'who' need 3 logprob ids, more than max_logprob_ids 2" in err.value.message


def joint(**over: Any) -> ReadSettings:
    return doc(read_mode=ReadMode.JOINT, **over)


def test_joint_unit_uses_lines_up_to_ten_questions(standin_tokenizer: HFTextTokenizer) -> None:
    d = make({f"question-{i}": NOUL for i in range(10)})
    (unit,) = plan_decision(d, joint(), standin_tokenizer).units
    assert [s.canvas_id for s in unit.slots] == [f"q{i}" for i in range(10)]
    assert tokens(standin_tokenizer, unit.template_ids[:9]) == \
        ["q", "0", ":", "▁yes", "\n", "q", "1", ":", "▁yes"]
    assert unit.logprob_ids == tuple(sorted(unit.slots[0].label_ids))


def test_joint_unit_past_ten_questions_is_indexed(standin_tokenizer: HFTextTokenizer) -> None:
    d = make({f"question-{i}": NOUL for i in range(12)})
    (unit,) = plan_decision(d, joint(), standin_tokenizer).units
    assert len(unit.slots) == 12
    assert tokens(standin_tokenizer, unit.template_ids[:6]) == ["q", "0", "yes", "▁q", "1", "yes"]
    for slot in unit.slots:
        assert tokens(standin_tokenizer, [unit.template_ids[slot.position]]) == ["yes"]
    assert "q0<label> q1<label>" in unit.messages[1]["content"]


@pytest.mark.parametrize(("settings", "n_questions", "max_units"), [
    (joint(joint_max_questions=4), 10, 3),
    (joint(canvas_length=32), 12, 12),
    (joint(canvas_length=48, canvas_step=16), 24, 24),
])
def test_joint_chunking_keeps_every_question_once(standin_tokenizer: HFTextTokenizer,
                                                  settings: ReadSettings, n_questions: int,
                                                  max_units: int) -> None:
    d = make({f"q-{i}": NOUL for i in range(n_questions)})
    plan = plan_decision(d, settings, standin_tokenizer)
    covered = [qi for u in plan.units for qi in u.question_indices]
    assert covered == list(range(n_questions))
    assert 1 < len(plan.units) <= max_units
    assert [u.index for u in plan.units] == list(range(len(plan.units)))
    for unit in plan.units:
        assert unit.width <= settings.canvas_length
        assert len(unit.question_indices) <= settings.joint_max_questions


def test_joint_chunks_on_too_many_logprob_ids(standin_tokenizer: HFTextTokenizer) -> None:
    d = make({"n": NOUL, "c": CHOICE3})
    plan = plan_decision(d, joint(max_logprob_ids=3), standin_tokenizer)
    assert [u.question_indices for u in plan.units] == [(0,), (1,)]


def test_joint_single_question_still_too_wide_is_rejected(
        standin_tokenizer: HFTextTokenizer) -> None:
    with pytest.raises(TemplateError, match="'q-0' needs 6 canvas positions"):
        plan_decision(make({"q-0": NOUL, "q-1": NOUL}), joint(canvas_length=4, canvas_step=4),
                      standin_tokenizer)


def test_resolution_is_cached(standin_tokenizer: HFTextTokenizer) -> None:
    args = (standin_tokenizer, [("yes", "no")], ["q0"], "lines")
    assert resolve_slots(*args, question_ids=["a"]) is resolve_slots(*args, question_ids=["b"])
