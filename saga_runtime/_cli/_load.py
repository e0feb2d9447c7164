"""What the command line reads from its arguments: the user's ToolRegistry, and ages like `2d`."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

from saga_runtime._records import Queue
from saga_runtime._tools import ToolRegistry

__all__ = ["load_registry", "parse_age", "parse_since"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str, option: str) -> timedelta:
    """Return an age like 90s, 30m, 1h, 2d or 1w as a timedelta; raise ValueError naming `option`."""
    match = _AGE.match(text)
    if not match:
        raise ValueError(f"{option} takes an age like 90s, 30m, 1h, 2d, 1w, not {text!r}")
    return timedelta(**{_UNITS[match.group(2).lower()]: float(match.group(1))})


def parse_since(text: str, *, current: datetime | None = None) -> datetime:
    """Return the cutoff of `--since`: an age (90s, 30m, 1h, 2d, 1w) before now, or an ISO date or time (UTC)."""
    match = _AGE.match(text)
    if match:
        amount, unit = float(match.group(1)), match.group(2).lower()
        return (current or datetime.now(UTC)) - timedelta(**{_UNITS[unit]: amount})
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since takes an age like 30m, 1h, 2d, 1w, or a date like 2024-05-17, got {text!r}"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _import(target: str) -> ModuleType:
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        if not path.is_file():
            raise ImportError(f"no file {target!r}: --tools takes module:attribute or path/to/file.py:attribute")
        name = f"_saga_runtime_tools_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {target!r} as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    # Like `python -m`: a module in the working directory is found.
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    return importlib.import_module(target)


def load_queues(spec: str) -> list[Queue]:
    """Return the list of `Queue` objects `spec` names (`module:attribute`)."""
    target, sep, attribute = spec.partition(":")
    if not sep or not target or not attribute:
        raise ValueError(f"--queues takes module:attribute (e.g. myapp.queues:QUEUES), got {spec!r}")
    value: object = _import(target)
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise AttributeError(f"the module {target!r} has no {attribute!r}; name your list of Queue objects")
        value = getattr(value, part)
    if isinstance(value, Queue):
        return [value]
    if not isinstance(value, list | tuple) or not value or not all(isinstance(q, Queue) for q in value):
        raise TypeError(f"{spec!r} is not a list of saga_runtime.Queue objects")
    return list(value)


def load_registry(spec: str) -> ToolRegistry:
    """Return the ToolRegistry `spec` names (`module:attribute`); the attribute may be a function returning one."""
    target, sep, attribute = spec.partition(":")
    if not sep or not target or not attribute:
        raise ValueError(f"--tools takes module:attribute (e.g. myapp.tools:registry), got {spec!r}")
    try:
        module = _import(target)
    except ImportError as exc:
        raise ImportError(
            f"cannot import the tools module {target!r} ({exc}); run from the directory it is in, or install it"
        ) from None
    except Exception as exc:
        raise ImportError(f"importing the tools module {target!r} failed: {type(exc).__name__}: {exc}") from None
    value: object = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise AttributeError(f"the tools module {target!r} has no {attribute!r}; name your ToolRegistry")
        value = getattr(value, part)
    if callable(value) and not isinstance(value, ToolRegistry):
        value = value()
    if not isinstance(value, ToolRegistry):
        raise TypeError(f"{spec!r} is a {type(value).__name__}, not a saga_runtime.ToolRegistry")
    return value
