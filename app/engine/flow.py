"""``DecisionFlow``: the sans-I/O loop of one decision.

The flow hands out read requests and is sent read results until every unit's stop rule
says stop; it never performs I/O. See ``app.engine`` for the loop a runner writes::

    flow = DecisionFlow(plan, settings, vocab_size=tokenizer.info.vocab_size)
    while not flow.done:
        requests = flow.next_requests()
        results = await asyncio.gather(*(upstream.read(r) for r in requests))
        for request, result in zip(requests, results):
            flow.record(request, result)
    answers, draws = flow.answers(), flow.draws()
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from app.engine.aggregate import aggregate, trivial_answer
from app.engine.fold import fold_row
from app.engine.kinds import NOUL
from app.engine.noise import derive_seed, reader_seed
from app.engine.policy import stop_reason
from app.engine.questions import parse_question
from app.engine.template import plan_decision
from app.engine.types import (
    Answer,
    Decision,
    DecisionPlan,
    DrawRecord,
    ReadRequest,
    ReadResult,
    ReadSettings,
    ReadUnit,
    SlotRead,
    StopReason,
    TextTokenizer,
)
from app.engine.wire import build_request
from app.errors import MalformedResponse

__all__ = ["DecisionFlow", "build_probe_request"]


@dataclass
class _UnitState:
    unit: ReadUnit
    key: str  #: comma-joined user question ids: part of the noise seed
    draws: list[tuple[SlotRead, ...]] = field(default_factory=list)
    records: list[DrawRecord] = field(default_factory=list)
    stop: StopReason | None = None
    pending: ReadRequest | None = None


class DecisionFlow:
    """Draws of every read unit of a plan until each unit's stop rule says stop.

    Units proceed independently: ``next_requests`` returns one request per open unit,
    and the same requests again until their results are recorded.
    """

    def __init__(self, plan: DecisionPlan, settings: ReadSettings, *, vocab_size: int,
                 replicate: int = 0) -> None:
        self.plan = plan
        self.settings = settings
        self.vocab_size = vocab_size
        self.replicate = replicate
        questions = plan.decision.questions
        self._units = [
            _UnitState(unit=u, key=",".join(questions[i].id for i in u.question_indices))
            for u in plan.units
        ]

    def _request(self, state: _UnitState) -> ReadRequest:
        draw = len(state.draws)
        unit = state.unit
        if unit.first_noise and (self.settings.seed, self.replicate, draw) == (0, 0, 0):
            # the vllm layout's first draw: the noise vLLM's own reader draws from the prompt
            return build_request(unit, self.settings, draw=draw,
                                 seed=reader_seed(unit.prompt_ids), vocab_size=self.vocab_size,
                                 noise=unit.first_noise)
        seed = derive_seed(self.settings.seed, self.replicate, self.plan.decision.id,
                           state.key, draw)
        return build_request(unit, self.settings, draw=draw, seed=seed,
                             vocab_size=self.vocab_size)

    def next_requests(self) -> list[ReadRequest]:
        """One next draw per unit not yet stopped; ``[]`` once done."""
        out: list[ReadRequest] = []
        for state in self._units:
            if state.stop is None:
                if state.pending is None:
                    state.pending = self._request(state)
                out.append(state.pending)
        return out

    def _state_for(self, request: ReadRequest) -> _UnitState:
        if not 0 <= request.unit < len(self._units):
            raise RuntimeError(f"request for unit {request.unit}, which this flow does not have")
        state = self._units[request.unit]
        if state.pending is None or state.pending.draw != request.draw:
            raise RuntimeError(f"unit {request.unit} draw {request.draw} is not outstanding "
                               f"(call next_requests() and record each request once)")
        return state

    def _fold(self, state: _UnitState, request: ReadRequest,
              result: ReadResult) -> tuple[SlotRead, ...]:
        reads = []
        for slot in state.unit.slots:
            row = result.rows.get(slot.position)
            if row is None:
                raise MalformedResponse(f"no logprob row for slot position {slot.position} "
                                        f"(canvas id {slot.canvas_id}, draw {request.draw})")
            reads.append(fold_row(row, slot.label_ids, question_index=slot.question_index,
                                  draw=request.draw, also_ids=slot.also_ids))
        return tuple(reads)

    def record(self, request: ReadRequest, result: ReadResult) -> None:
        """Fold the result of an outstanding request and apply the stop rule.

        Raises:
            MalformedResponse: a slot row or a label logprob is missing; the flow is left
                unchanged and the same request stays outstanding.
            RuntimeError: the request is not outstanding in this flow.
        """
        state = self._state_for(request)
        reads = self._fold(state, request, result)
        state.draws.append(reads)
        state.records.extend(
            DrawRecord(unit=request.unit, draw=request.draw, seed=request.seed, read=r,
                       latency_ms=result.latency_ms, prompt_tokens=result.prompt_tokens,
                       cached_tokens=result.cached_tokens) for r in reads)
        state.pending = None
        state.stop = stop_reason(self.settings, state.draws)

    @property
    def done(self) -> bool:
        """Whether every unit has stopped (a plan with no units is done at once)."""
        return all(state.stop is not None for state in self._units)

    @property
    def n_reads(self) -> int:
        """Reads recorded so far."""
        return sum(len(state.draws) for state in self._units)

    def answers(self) -> tuple[Answer, ...]:
        """One answer per question, in decision order.

        Raises:
            RuntimeError: the flow is not done.
        """
        if not self.done:
            raise RuntimeError("answers() before the flow is done")
        questions = self.plan.decision.questions
        by_index = {i: trivial_answer(questions[i]) for i in self.plan.trivial}
        for state in self._units:
            assert state.stop is not None
            for k, qi in enumerate(state.unit.question_indices):
                reads = [draw[k] for draw in state.draws]
                by_index[qi] = aggregate(questions[qi], reads, state.stop)
        return tuple(by_index[i] for i in range(len(questions)))

    def draws(self) -> tuple[DrawRecord, ...]:
        """Every question's raw material per draw, by unit, draw and slot order."""
        return tuple(rec for state in self._units for rec in state.records)


#: The readiness probe: one tiny yes/no read.
PROBE_DECISION = Decision(
    id="dreads-probe", state="The sky is blue.",
    questions=(parse_question("probe", {"type": NOUL.name, "instructions": "Is the sky blue?"}),),
)


def build_probe_request(settings: ReadSettings, tokenizer: TextTokenizer) -> ReadRequest:
    """A tiny noul read (draw 0 of a fixed decision) used by readiness checks, at the run's
    full canvas width: ``/v1/models`` does not report the served canvas, and a server whose
    canvas is narrower refuses this read, before any decision is claimed.

    Raises:
        ConfigError: the settings cannot be read with this tokenizer.
    """
    plan = plan_decision(PROBE_DECISION, settings, tokenizer)
    unit = plan.units[0]
    pads = (tokenizer.info.pad_id,) * (settings.canvas_length - unit.width)
    wide = replace(unit, template_ids=unit.template_ids + pads, width=settings.canvas_length)
    flow = DecisionFlow(replace(plan, units=(wide,)), settings,
                        vocab_size=tokenizer.info.vocab_size)
    return flow.next_requests()[0]
