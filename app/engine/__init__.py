"""The pure decision engine: job lines -> read requests -> answers. No I/O.

Other layers import from here, never from the private modules.
"""

from __future__ import annotations

from app.engine.aggregate import aggregate, trivial_answer
from app.engine.digest import content_digest
from app.engine.estimate import Estimate, Prices, ReadTally, Span, draw_span, estimate
from app.engine.flow import DecisionFlow, build_probe_request
from app.engine.fold import fold_row
from app.engine.noise import derive_seed, seed_canvas
from app.engine.openai.shapes import ChoiceShape, PredicateShape, QuestionShape, ScoreShape
from app.engine.policy import stop_reason
from app.engine.prompt import (
    SYSTEM_INSTRUCTION,
    PromptParts,
    build_messages,
    parse_messages,
    serialize_state,
)
from app.engine.questions import (
    QuestionsMemo,
    SpecsMemo,
    decision_from_payload,
    decision_payload,
    line_id,
    parse_decision,
    parse_question,
)
from app.engine.settings_hash import (
    SettingChange,
    changed_batch_invariance,
    changed_fingerprint,
    changed_settings,
    check_settings,
    settings_from_dict,
    settings_hash,
    settings_to_dict,
)
from app.engine.template import answer_lines, canvas_width, plan_decision, resolve_unit
from app.engine.types import (
    Answer,
    AnswerBy,
    Decision,
    DecisionPlan,
    DrawRecord,
    Endpoint,
    Layout,
    Message,
    PolicyName,
    Question,
    QuestionType,
    ReadMode,
    ReadRequest,
    ReadResult,
    ReadSettings,
    ReadUnit,
    Refusal,
    ServerFingerprint,
    SlotRead,
    SlotRow,
    SlotSpec,
    StopReason,
    TextTokenizer,
    TokenizerInfo,
)
from app.engine.wire import FORBIDDEN_FIELDS, build_request, encode_body, parse_response

__all__ = [
    "FORBIDDEN_FIELDS",
    "SYSTEM_INSTRUCTION",
    "Answer",
    "AnswerBy",
    "ChoiceShape",
    "Decision",
    "DecisionFlow",
    "DecisionPlan",
    "DrawRecord",
    "Endpoint",
    "Estimate",
    "Layout",
    "Message",
    "PolicyName",
    "PredicateShape",
    "Prices",
    "PromptParts",
    "Question",
    "QuestionShape",
    "QuestionType",
    "QuestionsMemo",
    "ReadMode",
    "ReadRequest",
    "ReadResult",
    "ReadSettings",
    "ReadTally",
    "ReadUnit",
    "Refusal",
    "ScoreShape",
    "ServerFingerprint",
    "SettingChange",
    "SlotRead",
    "SlotRow",
    "SlotSpec",
    "Span",
    "SpecsMemo",
    "StopReason",
    "TextTokenizer",
    "TokenizerInfo",
    "aggregate",
    "answer_lines",
    "build_messages",
    "build_probe_request",
    "build_request",
    "canvas_width",
    "changed_batch_invariance",
    "changed_fingerprint",
    "changed_settings",
    "check_settings",
    "content_digest",
    "decision_from_payload",
    "decision_payload",
    "derive_seed",
    "draw_span",
    "encode_body",
    "estimate",
    "fold_row",
    "line_id",
    "parse_decision",
    "parse_messages",
    "parse_question",
    "parse_response",
    "plan_decision",
    "resolve_unit",
    "seed_canvas",
    "serialize_state",
    "settings_from_dict",
    "settings_hash",
    "settings_to_dict",
    "stop_reason",
    "trivial_answer",
]
