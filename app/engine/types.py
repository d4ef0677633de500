"""Values the engine takes and returns. All frozen; no I/O anywhere in ``app.engine``.

Flow of one decision (see ``flow.DecisionFlow``)::

    Decision --plan_decision--> DecisionPlan (ReadUnits: prompt + answer template + slots)
    DecisionFlow.next_requests() -> [ReadRequest]   # the runner sends them (HTTP or in-process)
    DecisionFlow.record(request, ReadResult)        # folds the slot rows into SlotReads
    ... until DecisionFlow.done
    DecisionFlow.answers() -> (Answer, ...)   DecisionFlow.draws() -> (DrawRecord, ...)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # shapes.py imports this module
    from app.engine.openai.shapes import QuestionShape

__all__ = [
    "DEFAULT_CANVAS",
    "DEFAULT_MODEL",
    "DEFAULT_PORT",
    "DEFAULT_UPSTREAM",
    "SIM",
    "SIMULATOR_LINE",
    "SIMULATOR_NOTE",
    "STANDIN",
    "Answer",
    "AnswerBy",
    "Decision",
    "DecisionPlan",
    "DrawRecord",
    "Endpoint",
    "ImageData",
    "Layout",
    "Message",
    "PolicyName",
    "Question",
    "ReadMode",
    "ReadRequest",
    "ReadResult",
    "ReadSettings",
    "ReadUnit",
    "Refusal",
    "ServerFingerprint",
    "SlotRead",
    "SlotRow",
    "SlotSpec",
    "StopReason",
    "TextTokenizer",
    "TokenizerInfo",
    "is_simulator",
]

JSON = Any
#: A chat message: ``{"role", "content"}``, the content a string, or for a decision with images
#: a list of OpenAI content parts (its ``image_url`` parts first, then one ``text`` part).
Message = Mapping[str, Any]
#: The tokenizer name that selects the bundled stand-in (``app.tokenizer.hf.load_tokenizer``),
#: the simulator's tokenizer and a new run's default.
STANDIN = "standin"
#: The served model name a run asks for and the simulator serves, unless told otherwise.
DEFAULT_MODEL = "dgemma"
#: The canvas length (tokens) a run reads with and the simulator serves, unless told otherwise.
DEFAULT_CANVAS = 320
#: The port ``dreads sim`` serves on unless told otherwise, and so the default upstream's.
DEFAULT_PORT = 8001
#: Where a run reads unless told otherwise: a server on this host (vLLM, or ``dreads sim``).
DEFAULT_UPSTREAM = f"http://127.0.0.1:{DEFAULT_PORT}"


class Layout(StrEnum):
    VLLM = "vllm"  #: vLLM 0.33's own reader, token for token (default; see ``vllm_reader``)
    DOCUMENT_FIRST = "document_first"  #: fixed system text, then state, then questions
    REFERENCE = "reference"  #: the reference server's: questions in system, state in user


class ReadMode(StrEnum):
    ISOLATED = "isolated"  #: one question per read (default)
    JOINT = "joint"  #: a decision's questions share one canvas (chunked when too wide)


class PolicyName(StrEnum):
    AGREE = "agree"  #: stop at 1 if near-certain, else when every label agrees within threshold
    ENTROPY = "entropy"  #: the reference server's auto: 1 read, up to max if entropy > threshold
    FIXED = "fixed"  #: exactly N draws


class Endpoint(StrEnum):
    CHAT = "chat"  #: POST /v1/chat/completions with messages
    COMPLETIONS = "completions"  #: POST /v1/completions with prompt token ids


class AnswerBy(StrEnum):
    """The names of the built-in answer sources (a run's ``answer_by``); what each one is and
    does is its ``SourceSpec`` in ``app.engine.sources``, which plugins add to."""

    READS = "reads"  #: dreads' own reads: canvases built here, multi-draw (default)
    SYSTEMONE = "systemone"  #: a ``/v1/systemone`` endpoint (Jev's shape): one request each
    DECISIONS = "decisions"  #: a ``/v1/decisions`` endpoint (OpenAI's shape): one request each


class StopReason(StrEnum):
    TRIVIAL = "trivial"  #: one option/level: answered without a read
    NEAR_CERTAIN = "near_certain"  #: agree: first draw's entropy <= threshold
    AGREED = "agreed"  #: agree: every label's probability within threshold across draws
    MAX_DRAWS = "max_draws"  #: agree/entropy: hit max_draws
    LOW_ENTROPY = "low_entropy"  #: entropy: first read at or below threshold
    FIXED = "fixed"  #: fixed: drew N
    ENDPOINT = "endpoint"  #: answered by a decision endpoint: its one draw


@dataclass(frozen=True)
class Question:
    """One question of a decision, in the Jev shapes, with its canvas labels resolved."""

    id: str  #: the user's id (can be long: "X3|C1|conflict")
    type: str  #: its kind's name (``app.engine.kinds``: yes/no, choice, score, ...)
    instructions: str  #: "" when the user gave none (a layout may then write a default)
    labels: tuple[str, ...]  #: canvas labels: ("yes","no"), ("A","B",..), ("1","2",..), ...
    options: tuple[str, ...]  #: user-facing name per label: yes/no, option names, level texts
    descriptions: tuple[str | None, ...]  #: per label: criteria text or None


@dataclass(frozen=True)
class Decision:
    """One job line: a state and its questions."""

    id: str
    state: JSON  #: a string or any JSON value
    questions: tuple[Question, ...]
    cell: str | None = None
    expected: Mapping[str, str] = field(default_factory=dict)  #: question id -> expected label
    #: An OpenAI Decisions request's own shape of each question, in question order, kept for
    #: its answers and ``export --format openai-batch``: its name, typed choice values or
    #: level labels (``app.engine.openai.shapes``). None for dreads' own lines.
    openai: tuple[QuestionShape, ...] | None = None
    #: The images the questions are about, as the line gave them (http(s) URLs, ``file://``
    #: URLs under an allowed directory, or data URLs), in order; () for a text decision.
    images: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageData:
    """One image of a decision, fetched and checked (``app.images``): what a read sends and
    what its prompt counts. Fetched once per decision, never once per draw."""

    ref: str  #: the reference the line gave (shown in reports and exports)
    url: str  #: what a request carries: a data URL of the fetched bytes
    sha256: str  #: of the fetched bytes
    media_type: str  #: ``image/png``, ``image/jpeg``, ...
    width: int
    height: int


@dataclass(frozen=True)
class ReadSettings:
    """Everything that shapes a read. Fixed at run creation and hashed."""

    model: str = DEFAULT_MODEL
    tokenizer: str = STANDIN
    canvas_length: int = DEFAULT_CANVAS  #: the served canvas (cap on width)
    canvas_step: int = 16
    layout: Layout = Layout.VLLM
    read_mode: ReadMode = ReadMode.ISOLATED
    policy: PolicyName = PolicyName.AGREE
    fixed_draws: int = 1  #: N for the fixed policy
    threshold: float = 0.1
    max_draws: int = 4
    steps: int = 1
    constrained: bool = False
    endpoint: Endpoint = Endpoint.CHAT
    seed: int = 0  #: run seed
    max_logprob_ids: int = 128
    joint_max_questions: int = 24  #: joint mode: most questions in one canvas before chunking
    #: Who answers, by its source's name (``app.engine.sources``): dreads' reads, or a decision
    #: endpoint at ``answer_url`` (one request per decision). The endpoint's API key is never
    #: a setting (``DREADS_ANSWER_API_KEY``).
    answer_by: str = AnswerBy.READS
    answer_url: str = ""  #: base URL of the decision endpoint ("" for reads)
    #: Budget of an endpoint-answered run: requests per second (0: no limit) and requests in
    #: flight. Recorded with the run but not hashed: ``resume`` may change them.
    answer_rps: float = 0.0
    answer_concurrency: int = 16


@dataclass(frozen=True)
class TokenizerInfo:
    """Ids taken from the tokenizer in use; nothing is hard-coded."""

    name: str
    vocab_size: int
    scaffold_text: str  #: the thought block "<|channel>thought\n<channel|>", "" if none
    scaffold_ids: tuple[int, ...]
    scaffold_in_prompt: bool  #: the chat template already ends the prompt with the scaffold
    turn_close_id: int  #: "<turn|>"
    pad_id: int
    #: What the chat template writes at the start of the reply for a generation prompt (after
    #: the assistant header), so that continuing an assistant message with this text plus more
    #: renders the generation prompt plus more. None: the template cannot continue a message
    #: that way, so a chat read cannot carry text after the generation prompt.
    reply_prefix: str | None = ""


class TextTokenizer(Protocol):
    """What the engine needs from a tokenizer (``app.tokenizer.hf`` adapts HF's)."""

    info: TokenizerInfo

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` with no special tokens added (special-token text is matched)."""
        ...

    def chat_prompt_ids(self, messages: tuple[Message, ...], *, prefill: str = "",
                        image_sizes: Sequence[tuple[int, int]] | None = None) -> list[int]:
        """The chat template applied with thinking off, as ids: the generation prompt on, or
        with ``prefill`` the messages followed by an assistant message of that text, continued
        (not closed). A message's ``image_url`` parts take, in order, the ids ``image_ids``
        gives for each (width, height) of ``image_sizes`` (None: read from the parts' data URLs),
        as the server expands them."""
        ...

    def image_ids(self, width: int, height: int) -> tuple[int, ...]:
        """The ids an image of ``width`` x ``height`` pixels takes in the prompt (DiffusionGemma:
        ``<|image>``, N x ``<|image|>``, ``<image|>``, N by Gemma 4's processor)."""
        ...


@dataclass(frozen=True)
class SlotSpec:
    """Where one question is answered on a canvas."""

    question_index: int  #: index into Decision.questions
    canvas_id: str  #: "q0", "q1", ... ("1", "2", ... in the vllm layout)
    position: int  #: slot position in the canvas
    label_ids: tuple[int, ...]  #: token id per label, in label order (distinct)
    #: per label, other ids that count for it too (the best of them reads); () when none
    also_ids: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class ReadUnit:
    """One canvas: the questions it reads, its prompt, template and slots."""

    index: int
    question_indices: tuple[int, ...]
    messages: tuple[Message, ...]
    template_ids: tuple[int, ...]  #: the canvas before noise, exactly ``width`` ids
    width: int
    slots: tuple[SlotSpec, ...]
    logprob_ids: tuple[int, ...]  #: the ids whose logprobs are asked for, in request order
    prompt_ids: tuple[int, ...]  #: the whole prompt as the server runs it (thought in)
    max_tokens: int  #: canvas rows asked for
    #: chat: an assistant message continued after the generation prompt (the thought block
    #: when the template does not write it); "" for the plain generation prompt
    prefill: str = ""
    #: slot noise of the first draw when it is not derived from the run seed (vllm layout:
    #: drawn from the prompt ids as vLLM's reader does); () otherwise
    first_noise: tuple[int, ...] = ()


@dataclass(frozen=True)
class DecisionPlan:
    decision: Decision
    units: tuple[ReadUnit, ...]
    trivial: tuple[int, ...] = ()  #: question indices answered without a read


@dataclass(frozen=True)
class ReadRequest:
    """One read = one HTTP request (or one in-process canvas)."""

    unit: int
    draw: int
    seed: int  #: the noise seed of this canvas
    endpoint: Endpoint
    body: Mapping[str, JSON]  #: the exact JSON body; serialised deterministically
    slots: tuple[int, ...]  #: slot positions to read
    logprob_ids: tuple[int, ...]
    #: the prompt's ids as the planner rendered them (the body's messages as the server renders
    #: them); an in-process engine reads these instead of rendering the body again. Empty: not
    #: known (a request made elsewhere)
    prompt_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class SlotRow:
    """The logprob row at one canvas position: requested ids plus the emitted argmax."""

    logprobs: Mapping[int, float]
    argmax_id: int
    argmax_logprob: float


@dataclass(frozen=True)
class ReadResult:
    rows: Mapping[int, SlotRow]  #: slot position -> row (only slots are kept)
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    latency_ms: float = 0.0


@dataclass(frozen=True)
class SlotRead:
    """One question's reading from one draw."""

    question_index: int
    draw: int
    probs: tuple[float, ...]  #: softmax over the labels' logprobs, label order
    #: raw logprob per label; None when the answer source gives none (a decision endpoint)
    label_logprobs: tuple[float, ...] | None
    label_mass: float | None  #: sum exp(label logprob), not renormalised; None: unavailable
    entropy: float  #: natural-log entropy of ``probs``
    argmax_id: int | None  #: None: the source does not say (a decision endpoint)
    argmax_is_label: bool | None  #: None: unavailable


@dataclass(frozen=True)
class DrawRecord:
    """The raw material of one question in one draw, as stored."""

    unit: int
    draw: int
    seed: int | None  #: None: the source draws its own noise (a decision endpoint)
    read: SlotRead
    latency_ms: float
    prompt_tokens: int | None
    cached_tokens: int | None


@dataclass(frozen=True)
class Answer:
    """A question's answer with every diagnostic."""

    question_id: str
    question_type: str  #: the question's kind's name
    label: str  #: canvas label of the answer (argmax of the mean)
    option: str  #: user-facing name of the answer
    probs: Mapping[str, float]  #: mean probability per canvas label
    p_yes: float | None  #: a yes/no kind's only (``Extras``)
    expected_level: float | None  #: a score kind's only: sum(i * p_i), 0-indexed
    legend: Mapping[str, str] | None  #: a score kind's only: {"0": level0, ...}
    confidence: float  #: 1 - H(mean)/ln K (Jev convention); 1.0 when K == 1
    top_prob: float  #: mean probability of the answer label
    stderr: float | None  #: n > 1 only
    agreement: float | None  #: n > 1 only: share of draws whose argmax is the answer
    draws: int
    stop_reason: StopReason
    label_mass: float | None  #: mean over draws; None: the answer source does not report it
    min_label_mass: float | None
    argmax_is_label: bool | None  #: in every draw; None: unavailable
    entropy: float  #: of the mean distribution
    #: the confidence a decision endpoint reported (vLLM's: top probability x label mass);
    #: None for dreads' reads, or when the endpoint gives none
    endpoint_confidence: float | None = None


@dataclass(frozen=True)
class Refusal:
    """A question the answer source declined to answer (a per-question refusal)."""

    question_id: str
    reason: str


@dataclass(frozen=True)
class ServerFingerprint:
    """What a run ran against (protocol.md section 9)."""

    engine: str  #: "vllm", "sim" or "transformers"
    model_id: str
    max_model_len: int | None
    version: str | None
    canvas_length: int
    constrained: bool = False
    #: whether the server returns the same logprobs for a read whatever it batches it with
    #: (vLLM's ``VLLM_BATCH_INVARIANT``); None: not known
    batch_invariant: bool | None = None
    #: where ``batch_invariant`` comes from: "observed" (the server says so) or "declared"
    #: (``DREADS_UPSTREAM_BATCH_INVARIANT``); None when it is not known
    batch_invariant_from: str | None = None


#: The upstream (``--upstream sim``, ``--answer-url sim``) that starts a simulator in the
#: process, and the engine a simulator's fingerprint names.
SIM = "sim"
#: How a simulator's ``/version`` begins (``dreads sim`` started apart, at a URL).
_SIM_VERSION = "dreads-sim"
#: What a one-line view of a simulator's answers says (``status``, ``export``), and the note
#: of a page or report of them.
SIMULATOR_LINE = "SIMULATOR: answers from dreads sim (synthetic), not from a model"
SIMULATOR_NOTE = ("SIMULATOR: these answers come from dreads sim (synthetic logprobs), not from "
                  "a model; the figures test the pipeline, not a model")


def is_simulator(upstream: str | None = None,
                 fingerprint: ServerFingerprint | Mapping[str, Any] | None = None, *,
                 version: str | None = None,
                 settings: Mapping[str, Any] | None = None) -> bool:
    """Whether answers come from the simulator (``dreads sim``: synthetic, not a model): the one
    rule every command, page and answer that names the simulator asks.

    A run's answers (``settings``: its settings dict) answered by a decision endpoint come
    from the simulator when ``answer_url`` is "sim"; answered by reads, when ``upstream`` is
    "sim" (started in the process), or the server's ``fingerprint`` names the engine "sim", or
    its ``/version`` (``version``, or the fingerprint's) begins with "dreads-sim" (a
    ``dreads sim`` started apart, at a URL)."""
    from app.engine.sources import stored_plans_reads  # (its readers import this module)

    if settings is not None and not stored_plans_reads(settings):
        return settings.get("answer_url") == SIM
    if upstream == SIM:
        return True
    if isinstance(fingerprint, ServerFingerprint):
        fingerprint = {"engine": fingerprint.engine, "version": fingerprint.version}
    if fingerprint:
        if fingerprint.get("engine") == SIM:
            return True
        version = version or fingerprint.get("version")
    return str(version or "").startswith(_SIM_VERSION)
