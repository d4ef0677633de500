"""``dreads engine``: the in-process transformers engine (``pip install -e .[engine]``).

``dreads engine make-tiny OUT_DIR`` saves a tiny random DiffusionGemma with the stand-in
tokenizer (tests, demos: ``dreads sim --engine transformers --model OUT_DIR``, or
``DREADS_ENGINE=transformers dreads run ... --model OUT_DIR``).

Other commands select the engine with the options below (``EngineOpt``, ``DeviceOpt``,
``DtypeOpt``) and ``app.runs.settings.engine_config()``; the engines are the registry
``app.connect.engines``; the model to load is the run's ``--model``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.cli._app import SETUP, app
from app.cli._typer import DreadsTyper
from app.connect.engines import ENGINES as ENGINE_SPECS
from app.connect.engines import engine_names
from app.errors import EXIT_FAILURE
from app.runs.settings import engine_config

__all__ = ["ENGINES", "DeviceOpt", "DtypeOpt", "EngineOpt", "engine_app", "engine_config",
           "make_tiny"]

_ENGINE = "Engine"

EngineOpt = Annotated[str | None, typer.Option(
    "--engine", help=" or ".join(f"{spec.kind} ({spec.summary})" for spec in ENGINE_SPECS.values())
    + ". Default DREADS_ENGINE or vllm.", rich_help_panel=_ENGINE)]
DeviceOpt = Annotated[str | None, typer.Option(
    "--device", help="transformers engine: cuda or cpu (default DREADS_DEVICE or cpu).",
    rich_help_panel=_ENGINE)]
DtypeOpt = Annotated[str | None, typer.Option(
    "--dtype", help="transformers engine: bfloat16 or float32 (default DREADS_DTYPE).",
    rich_help_panel=_ENGINE)]

engine_app = DreadsTyper(help="The in-process transformers engine (pip install -e "
                         "'.\\[engine]').", no_args_is_help=True)
app.add_typer(engine_app, name="engine", rich_help_panel=SETUP)

ENGINES = engine_names()


@engine_app.command("make-tiny")
def make_tiny(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write (created if missing).")],
    seed: Annotated[int, typer.Option(help="Weight seed.")] = 0,
    tokenizer: Annotated[str | None, typer.Option(
        help="Tokenizer directory (default: the bundled stand-in).")] = None,
) -> None:
    """Save a tiny random DiffusionGemma (2 layers, 4 experts) with a tokenizer to OUT_DIR."""
    try:
        from app.inprocess.tiny import make_tiny_dir
    except ImportError as exc:
        typer.echo(f"error: the transformers engine needs torch: pip install -e .[engine] "
                   f"({exc})", err=True)
        raise typer.Exit(EXIT_FAILURE) from exc
    path = make_tiny_dir(out_dir, tokenizer_dir=tokenizer, seed=seed)
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    typer.echo(f"tiny DiffusionGemma written to {path} ({size / 1e6:.1f} MB); serve it with "
               f"`dreads sim --engine transformers --model {path}`")
