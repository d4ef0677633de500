"""``dreads sim``: serve the vLLM read simulator in the foreground."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from app.cli._app import SERVERS, app
from app.connect.engines import is_in_process
from app.engine import DEFAULT_CANVAS, DEFAULT_MODEL, DEFAULT_PORT, STANDIN
from app.sim.options import SimOptions

__all__ = ["sim"]

_GPU = "GPU model"
_FAULTS = "Fault injection"
_ANSWERS = "Answers"


class _SimFormatter(logging.Formatter):
    """Every line says it comes from the simulator."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        return line if line.startswith("[dreads sim]") else f"[dreads sim] {line}"


def _engine_model(engine: str, model: str) -> str | None:
    """The checkpoint an in-process engine answers with; None for the synthetic 'sim'.

    Raises:
        ConfigError: neither 'sim' nor a registered engine.
    """
    if engine == "sim":
        return None
    return model if is_in_process(engine) else None


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_SimFormatter("%(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


@app.command("sim", rich_help_panel=SERVERS)
def sim(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0 = a free one).")] = DEFAULT_PORT,
    model: Annotated[str, typer.Option(help="Served model name.")] = DEFAULT_MODEL,
    canvas: Annotated[int, typer.Option(min=16, help="Served canvas_length.")] = DEFAULT_CANVAS,
    max_model_len: Annotated[int, typer.Option(help="Reported max_model_len.")]
    = SimOptions.max_model_len,
    tokenizer: Annotated[str, typer.Option(help="Tokenizer: 'standin', hub id or path.")]
    = STANDIN,
    vocab: Annotated[int | None, typer.Option(help="Vocabulary size (default: tokenizer's).")]
    = None,
    key: Annotated[str | None, typer.Option(
        "--key", help="Answer key: JSONL lines {state, question, label}, the label as a job "
        "file's expected takes it (docs/jobfile.md); X.key.jsonl is read against X.jsonl "
        "beside it.", rich_help_panel=_ANSWERS)]
    = None,
    noise: Annotated[float, typer.Option(
        min=0.0, help="How much the noise token moves the logits.", rich_help_panel=_ANSWERS)]
    = 0.5,
    separation: Annotated[float, typer.Option(
        help="With --key: the true label's mean logit lead; sets the ranking quality "
             "(one read: 1.5 ~ AUC 0.96, 1.8 ~ 0.98).",
        rich_help_panel=_ANSWERS)] = 1.5,
    miscalibration: Annotated[float, typer.Option(
        min=0.0, help="Logits x (1+m), first label -m: miscalibrated, same ranking.",
        rich_help_panel=_ANSWERS)] = 0.0,
    joint_interference: Annotated[float, typer.Option(
        min=0.0, max=1.0, envvar="DREADS_SIM_JOINT_INTERFERENCE",
        help="With --key: on a joint read (several questions on one canvas) the answers "
             "separate worse and lean to the second label, so joint reads rank and recall "
             "worse (0.6: a drop like the field report's recall 0.49 joint, 0.84 isolated).",
        rich_help_panel=_ANSWERS)] = 0.0,
    step_ms: Annotated[float, typer.Option(
        min=0.0, help="GPU step length; 0 answers at once.", rich_help_panel=_GPU)] = 0.0,
    max_batch: Annotated[int, typer.Option(
        min=1, help="Reads served per step.", rich_help_panel=_GPU)] = 256,
    fail_rate: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="HTTP 500 on a body's first delivery.", rich_help_panel=_FAULTS)]
    = 0.0,
    hang_rate: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="No answer on a body's first delivery.", rich_help_panel=_FAULTS)]
    = 0.0,
    malformed_rate: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="A slot row misses a label (first delivery).",
        rich_help_panel=_FAULTS)] = 0.0,
    low_mass_rate: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Argmax not a label, low label mass (every delivery).",
        rich_help_panel=_FAULTS)] = 0.0,
    down_for: Annotated[float, typer.Option(
        min=0.0, help="Refuse connections for SECONDS at start.", rich_help_panel=_FAULTS)]
    = 0.0,
    decision_rps: Annotated[float, typer.Option(
        min=0.0, help="Like a hosted API: /v1/systemone and /v1/decisions answer 429 (with "
        "retry-after) past this many requests per second (0: no limit).",
        rich_help_panel=_FAULTS)] = 0.0,
    decision_max_concurrent: Annotated[int, typer.Option(
        min=0, help="Like a hosted API: decision requests past this many at once get 429 "
        "(0: no limit).", rich_help_panel=_FAULTS)] = 0,
    refuse_marker: Annotated[str | None, typer.Option(
        help="Decision routes answer a refusal for each question whose instructions contain "
        "this text.", rich_help_panel=_FAULTS)] = None,
    limit_mm_per_prompt: Annotated[str | None, typer.Option(
        help="Like vLLM's flag: the images one chat read may carry, as JSON "
             "'{\"image\": N}' (default: vLLM's 999); more is a 400.",
        rich_help_panel=_ANSWERS)] = None,
    engine: Annotated[str, typer.Option(
        help="'sim' (synthetic answers) or 'transformers': answer with the DiffusionGemma "
        "checkpoint --model names (pip install -e '.\\[engine]').", rich_help_panel=_ANSWERS)]
    = "sim",
    device: Annotated[str, typer.Option(help="--engine transformers: cpu or cuda.",
                                        rich_help_panel=_ANSWERS)] = "cpu",
    dtype: Annotated[str, typer.Option(help="--engine transformers: bfloat16 or float32.",
                                       rich_help_panel=_ANSWERS)] = "bfloat16",
    seed: Annotated[int, typer.Option(help="Seed of answers and faults.")] = 0,
    api_key: Annotated[str | None, typer.Option(
        "--api-key", envvar="DREADS_SIM_API_KEY",
        help="Like vLLM's --api-key: every /v1 route answers 401 without this bearer key.")]
    = None,
    generation_temperature: Annotated[float, typer.Option(
        help="The checkpoint's generation-config temperature, taken by a read that sends "
             "none (vLLM refuses any but 1.0 on a diffusion read).")] = 1.0,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "info",
) -> None:
    """Serve a SIMULATOR of vLLM 0.33's diffusion reads and decision routes (validation,
    logprobs, GPU batch, faults; /v1/systemone and /v1/decisions read as vLLM's own reader).

    Control it while it runs: GET /sim/stats, POST /sim/down?seconds=N (503 on every model
    route), POST /sim/up, POST /sim/throttle?seconds=N&retry_after=S (429 on every decision
    request), POST /sim/reset. Faults strike a body's first delivery only, so a
    retried read succeeds.
    """
    from app.errors import EXIT_FAILURE, EXIT_USAGE, ConfigError
    from app.sim import SimOptions, run_sim_forever
    from app.sim.images import image_limit

    _configure_logging(log_level)
    try:
        options = SimOptions(
            host=host, port=port, model=model, canvas_length=canvas, max_model_len=max_model_len,
            tokenizer=tokenizer, vocab=vocab, noise=noise, separation=separation,
            miscalibration=miscalibration, joint_interference=joint_interference,
            key_path=key, step_ms=step_ms, max_batch=max_batch,
            fail_rate=fail_rate, hang_rate=hang_rate, malformed_rate=malformed_rate,
            low_mass_rate=low_mass_rate, down_for_s=down_for, seed=seed,
            engine_model=_engine_model(engine, model), engine_device=device,
            engine_dtype=dtype, api_key=api_key, default_temperature=generation_temperature,
            decision_rps=decision_rps, decision_max_concurrent=decision_max_concurrent,
            refuse_marker=refuse_marker, image_limit=image_limit(limit_mm_per_prompt),
        )
        run_sim_forever(options)
    except (ConfigError, ValueError) as exc:
        typer.echo(f"[dreads sim] error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc
    except OSError as exc:  # the port is taken, a file cannot be read
        typer.echo(f"[dreads sim] error: {exc}", err=True)
        raise typer.Exit(EXIT_FAILURE) from exc
    except KeyboardInterrupt:
        pass
