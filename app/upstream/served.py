"""What a server serves, asked before a run's settings exist: the served model id, and whether
it is the simulator. Used to default ``--model`` and ``--tokenizer`` to the served model (the
stand-in tokenizer for the simulator) when the user set neither."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from app.engine import is_simulator, redact_url
from app.errors import ConfigError, UpstreamUnauthorized, UpstreamUnavailable

__all__ = ["ServedIdentity", "served_identity"]

#: What to set instead of asking the server.
_GIVE = ("--model NAME and --tokenizer HUB_ID_OR_PATH (or set DREADS_MODEL and "
         "DREADS_TOKENIZER)")


@dataclass(frozen=True)
class ServedIdentity:
    model_id: str
    is_sim: bool


def served_identity(url: str, *, timeout_s: float = 5.0,
                    transport: httpx.BaseTransport | None = None,
                    api_key: str | None = None) -> ServedIdentity:
    """``GET /v1/models`` and ``/version`` of ``url`` (``api_key``: the server's bearer key).

    Raises:
        UpstreamUnavailable: the server cannot be reached, or answers 5xx.
        ConfigError: it lists no model, or is not a vLLM; the message says what to set.
        UpstreamUnauthorized: it refuses the key (waiting cannot help).
    """
    base = url.rstrip("/")
    shown = redact_url(base)  #: as errors show it
    key = api_key
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with httpx.Client(base_url=base, timeout=timeout_s, transport=transport,
                          headers=headers) as client:
            models = client.get("/v1/models")
            if models.status_code in (401, 403):
                raise UpstreamUnauthorized.answered(
                    models.status_code, f"{shown} refused "
                    f"{'the' if key else 'a request without an'} API key")
            models.raise_for_status()
            data = models.json().get("data") or []
            version = client.get("/version")
            text = version.json().get("version", "") if version.status_code == 200 else ""
    except (httpx.TransportError, httpx.HTTPStatusError) as exc:
        raise UpstreamUnavailable(
            f"cannot ask {shown} which model it serves ({exc.__class__.__name__}: "
            f"{redact_url(str(exc))}); "
            f"start the server first, or pass {_GIVE}") from exc
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{shown} does not answer /v1/models as vLLM does "
                          f"({exc.__class__.__name__}: {redact_url(str(exc))}); check the URL, "
                          f"or pass {_GIVE}"
                          ) from exc
    if not data or "id" not in data[0]:
        raise ConfigError(f"{shown}/v1/models lists no model; pass --model and --tokenizer")
    return ServedIdentity(model_id=str(data[0]["id"]),
                          is_sim=is_simulator(version=str(text)))
