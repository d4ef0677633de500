"""A state longer than the model can read, told from its length alone (no tokenizing).

A tokenizer's token covers at most ``chars_per_token`` characters of text (its longest
vocabulary piece), so a state of ``n`` characters takes at least ``n / chars_per_token``
tokens. One of more than ``max_model_len * chars_per_token`` characters cannot fit the model's
context whatever the tokenizer makes of it, and is refused before it is tokenized: tokenizing
costs time and memory in proportion to the text (hundreds of bytes per character).
"""

from __future__ import annotations

from app.engine.types import Decision
from app.engine.values import serialize_state

__all__ = ["DEFAULT_MAX_MODEL_LEN", "state_chars", "state_too_long"]

#: The model's context, in tokens, where the server's ``max_model_len`` is not known (no
#: fingerprint yet, a decision endpoint): a state longer than this many tokens could hold is
#: refused from its length.
DEFAULT_MAX_MODEL_LEN = 262_144


def state_chars(decision: Decision) -> int:
    """The characters of ``decision``'s state as its prompt holds it (0: no state)."""
    if decision.state is None:
        return 0
    return len(serialize_state(decision.state))


def state_too_long(decision: Decision, max_model_len: int, chars_per_token: int) -> str | None:
    """Why ``decision`` is refused for its length (None: it may fit): its state and the
    longest instructions of one question (every read's prompt holds both) against what
    ``max_model_len`` tokens can hold."""
    state = state_chars(decision)
    asked = max((len(q.instructions) for q in decision.questions), default=0)
    limit = max_model_len * chars_per_token
    if state + asked <= limit:
        return None
    what = f"its state is {state:,} characters" + (
        f" and its longest instructions {asked:,}" if asked else "")
    return (f"{what}, more than the model can read: max_model_len {max_model_len:,} tokens "
            f"of at most {chars_per_token} characters each is {limit:,} characters; shorten "
            "it or split it into several decisions")
