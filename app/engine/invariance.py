"""Whether a model server is batch-invariant: what it says (observed), else what the operator
declared.

vLLM fixes it at start from its ``VLLM_BATCH_INVARIANT`` environment variable. Only its
development endpoint ``GET /server_info`` (served with ``VLLM_SERVER_DEV_MODE=1``, which vLLM
says not to use in production) lists that environment, under ``vllm_env``; no other route
(``/version``, ``/v1/models``, ``/metrics``) tells. So on an ordinary pod the value is the
operator's declaration, ``DREADS_UPSTREAM_BATCH_INVARIANT`` (docker-compose.yml sets it from
the variable it starts vLLM with). ``dreads sim`` serves ``/server_info`` as vLLM does, and is
batch-invariant by construction.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ENV_NAME", "OBSERVED_BY", "SERVER_INFO_PATH", "batch_invariance",
           "observed_batch_invariance"]

#: vLLM's route that lists its ``VLLM_*`` environment (development mode only).
SERVER_INFO_PATH = "/server_info"
#: vLLM's switch.
ENV_NAME = "VLLM_BATCH_INVARIANT"
#: What the fingerprint says of where the value comes from.
OBSERVED_BY, DECLARED_BY = "observed", "declared"


def observed_batch_invariance(server_info: Any) -> bool | None:
    """``VLLM_BATCH_INVARIANT`` as a ``/server_info`` body lists it; None when it does not."""
    env = server_info.get("vllm_env") if isinstance(server_info, dict) else None
    value = env.get(ENV_NAME) if isinstance(env, dict) else None
    if isinstance(value, bool):
        return value
    if isinstance(value, int | str) and str(value).strip() in ("0", "1"):
        return str(value).strip() == "1"
    return None


def batch_invariance(observed: bool | None,
                     declared: bool | None) -> tuple[bool | None, str | None]:
    """The value and where it comes from: the server's word wins over the declaration."""
    if observed is not None:
        return observed, OBSERVED_BY
    if declared is not None:
        return declared, DECLARED_BY
    return None, None
