"""Typer classes for dreads: hidden option aliases and a clean ``--help``.

- One name per option everywhere (``--database-url``, ``--wait``); the older spellings
  (``--db``, ``--database``, ``--timeout``) still work on the commands that have the option,
  without cluttering the help (``OPTION_ALIASES``).
- A plain flag takes no value, so its help shows no ``<bool>``; a list of choices is written
  ``<a | b>`` so a narrow terminal wraps it between choices, never inside a word.
- Docstrings are written wrapped at 100 columns; their paragraphs are re-flowed to the
  terminal's width (``reflow``) instead of keeping the source's line breaks.
- Only the invoked command is turned into Click parameters (``DreadsTyper.__call__``), the way
  Click's lazily loaded subcommands work: ``dreads status RUN`` does not build ``serve``'s 40
  options first. ``dreads --help``, completion and an unknown name build them all.
- A value that needs no conversion (none given, the command's own default, text for a text
  option) is passed as is (``_process_value``): Typer would build a pydantic validator for each
  parameter first, importing pydantic, a tenth of a short command's start-up. Anything else
  (a number, a path, a choice typed by the user) goes through Typer unchanged.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

__all__ = ["OPTION_ALIASES", "DreadsCommand", "DreadsGroup", "DreadsTyper", "reflow",
           "resolve_aliases"]

#: hidden spelling -> the option's one documented name
OPTION_ALIASES = {"--db": "--database-url", "--database": "--database-url",
                  "--timeout": "--wait"}


def resolve_aliases(args: list[str], known: set[str]) -> list[str]:
    """``args`` with each hidden alias (``--db x``, ``--db=x``) spelled as its option's
    documented name, where the command has that option and not the alias itself."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        name, eq, value = arg.partition("=")
        target = OPTION_ALIASES.get(name)
        if target is not None and target in known and name not in known:
            arg = target + eq + value
        out.append(arg)
    return out


def reflow(text: str | None) -> str | None:
    """Help text with each paragraph on one line (paragraphs starting with ``\\b`` kept)."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def _tidy(param: Any, ctx: Any) -> None:
    """Help display of one parameter: no type on a flag, choices that wrap between words."""
    if not isinstance(param, TyperOption) or param.metavar is not None:
        return
    if param.is_flag:
        param.metavar = ""
        return
    shown = param.display_type(ctx)
    if "|" in shown:
        param.metavar = shown.replace("|", " | ")


def _as_given(param: Any, ctx: Any, value: Any) -> bool:
    """Whether ``value`` is already what Typer's conversion would return."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None or param.multiple or param.nargs != 1:
        return False
    if value is None:
        return not param.required
    if isinstance(value, str) and desc.annotation is str:
        return True
    source = ctx.get_parameter_source(param.name)
    return source is not None and source.name in ("DEFAULT", "DEFAULT_MAP")


def _process_value(param: Any, ctx: Any, value: Any) -> Any:
    if not _as_given(param, ctx, value):
        return type(param).process_value(param, ctx, value)
    return param.callback(ctx, param, value) if param.callback is not None else value


def _pass_through(params: Sequence[Any]) -> None:
    """Give each parameter ``_process_value`` (once; ``--help`` and completion options are
    added after construction, hence from ``get_params``)."""
    for param in params:
        if not isinstance(getattr(param, "process_value", None), partial):
            param.process_value = partial(_process_value, param)


def _tidied(params: list[Any], ctx: Any) -> list[Any]:
    """A command's or group's parameters, passed through unconverted where they can be and
    with their help tidied."""
    _pass_through(params)
    for param in params:
        _tidy(param, ctx)
    return params


class DreadsCommand(TyperCommand):
    """A command with the hidden option aliases, the tidy help and no needless conversion."""

    def __init__(self, name: str | None, **kwargs: Any) -> None:
        kwargs["help"] = reflow(kwargs.get("help"))
        super().__init__(name, **kwargs)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        known = {name for p in self.params for name in (*p.opts, *p.secondary_opts)}
        return super().parse_args(ctx, resolve_aliases(args, known))

    def get_params(self, ctx: Any) -> list[Any]:
        return _tidied(super().get_params(ctx), ctx)


class DreadsGroup(TyperGroup):
    """The ``dreads`` group (and ``dreads db``, ``dreads engine``) with the tidy help."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["help"] = reflow(kwargs.get("help"))
        super().__init__(**kwargs)

    def get_params(self, ctx: Any) -> list[Any]:
        return _tidied(super().get_params(ctx), ctx)


def _invoked(argv: Sequence[str]) -> str | None:
    """The command name of a command line (its first word that is not an option)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


class DreadsTyper(typer.Typer):
    """``typer.Typer`` whose commands are ``DreadsCommand`` and groups ``DreadsGroup``, and
    which builds only the command it runs."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", DreadsGroup)
        kwargs.setdefault("rich_markup_mode", "rich")
        kwargs.setdefault("pretty_exceptions_enable", False)
        super().__init__(**kwargs)

    def command(self, name: str | None = None, *, cls: Any = None,
                **kwargs: Any) -> Any:
        return super().command(name, cls=cls or DreadsCommand, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        argv = kwargs.get("args") or (args[0] if args else None) or sys.argv[1:]
        name = _invoked(argv)
        commands, groups = self.registered_commands, self.registered_groups
        chosen = [c for c in commands if _command_name(c) == name]
        chosen_groups = [g for g in groups if g.name == name]
        completing = any(k.endswith("_COMPLETE") for k in os.environ)
        if completing or not (chosen or chosen_groups):
            return super().__call__(*args, **kwargs)
        self.registered_commands, self.registered_groups = chosen, chosen_groups
        try:
            return super().__call__(*args, **kwargs)
        finally:
            self.registered_commands, self.registered_groups = commands, groups


def _command_name(info: Any) -> str:
    return str(info.name or info.callback.__name__.replace("_", "-"))
