"""The options every command shares: where the store is and its key, accepted before or after the command's name.

`saga-runtime --db URL list` and `saga-runtime list --db URL` are the same; when both are given, the one after the
command wins. Each option reads the same environment variable in both places, so an option typed on the command
line, before or after the command, always wins over the environment.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Annotated, Any, TypeVar, cast

import typer

from saga_runtime._storage import DEFAULT_URL, ENV_VAR

__all__ = [
    "KEY_VAR",
    "DecideToolsOption",
    "JsonOption",
    "Options",
    "ToolsOption",
    "options",
    "store_options",
]

KEY_VAR = "SAGA_RUNTIME_SIGNING_KEY"
_PLACEMENT = "Goes before or after the command name; given in both places, the one after it wins."
_PANEL = "Store (before or after the command)"

Command = TypeVar("Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class Options:
    """The store options in effect for a command; each field is one option of `_STORE_OPTIONS`."""

    db: str | None = None
    signing_key: str | None = None

    @property
    def url(self) -> str:
        """Return the store URL in effect."""
        return self.db or os.environ.get(ENV_VAR) or DEFAULT_URL


def _record(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """Record a store option's value as the context's `Options`, as it is parsed.

    Before the command, every value counts, from the command line or the environment. After the command, only one
    typed there does: the same environment variable must not undo a value typed before the command.
    """
    before = ctx.find_object(Options) or Options()
    source = ctx.get_parameter_source(param.name) if param.name else None
    if ctx.parent is None or (source is not None and source.name == "COMMANDLINE"):
        ctx.obj = replace(before, **{str(param.name): value})
    return value


# The declaration of each store option, once: the main callback and every command get these same parameters.
_STORE_OPTIONS: dict[str, Any] = {
    "db": Annotated[
        str | None,
        typer.Option(
            "--db",
            envvar=ENV_VAR,
            show_envvar=True,
            help=f"Store URL (default {DEFAULT_URL}). {_PLACEMENT}",
            rich_help_panel=_PANEL,
            callback=_record,
        ),
    ],
    "signing_key": Annotated[
        str | None,
        typer.Option(
            "--signing-key",
            envvar=KEY_VAR,
            show_envvar=True,
            help=f"Key the records are signed with (use the env). {_PLACEMENT}",
            rich_help_panel=_PANEL,
            callback=_record,
        ),
    ],
}
assert set(_STORE_OPTIONS) == {f.name for f in fields(Options)}, "one option per field of Options"

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
ToolsOption = Annotated[
    str,
    typer.Option(
        "--tools",
        "-t",
        help="Where your ToolRegistry is: module:attribute (importable from here) or path/to/file.py:attribute.",
    ),
]


def store_options(command: Command) -> Command:
    """Add the store options to a command (or to the main callback), under the decorator that registers it.

    Typer reads a command's options from its signature, so the returned function's signature is the command's
    own plus `--db` and `--signing-key`. Their values reach the command through `options(ctx)`, not as arguments.
    """
    signature = inspect.signature(command, eval_str=True)
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
        for name, annotation in _STORE_OPTIONS.items()
    ]

    @functools.wraps(command)
    def with_store_options(*args: Any, **kwargs: Any) -> Any:
        for name in _STORE_OPTIONS:
            del kwargs[name]  # recorded by _record as they were parsed
        return command(*args, **kwargs)

    with_store_options.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), *added]
    )
    return cast(Command, with_store_options)


def options(ctx: typer.Context) -> Options:
    """Return the store options in effect for the running command."""
    found = ctx.find_object(Options)
    assert found is not None, "every command is decorated with @store_options"
    return found


# An optional --tools: where a command can go on with the saga itself, else a worker does.
DecideToolsOption = Annotated[
    str | None,
    typer.Option(
        "--tools",
        "-t",
        help="Your ToolRegistry (module:attribute or path/to/file.py:attribute): go on with the saga here once "
        "its group is decided. Without it the decision is recorded only, and a worker (serve) goes on.",
    ),
]
