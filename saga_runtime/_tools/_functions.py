"""SagaFunction: a registered saga function (`@registry.saga`), its version and its argument model."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic

from saga_runtime._tools._spec import _NAME_RULE, _resolve, _type_hints, params_model, plain_fields, plain_kwargs
from saga_runtime._tools._versions import check_versions

__all__ = ["SagaFunction", "build_function"]


@dataclass(frozen=True, slots=True, eq=False)
class SagaFunction:
    """An `async def` whose first parameter takes the saga; its other parameters are the saga's arguments."""

    name: str
    fn: Callable[..., Any]
    args_model: type[pydantic.BaseModel]
    accepts_extra: bool
    version: str = "1"
    compatible: tuple[str, ...] = ()
    # Its arguments' fields when each is plain (`plain_fields`): checked without pydantic, to the same kwargs.
    plain: Mapping[str, tuple[frozenset[type] | None, Any]] | None = field(default=None, repr=False)

    def accepts(self, version: str) -> bool:
        """Tell whether this code can resume a saga recorded under `version`."""
        return version == self.version or version in self.compatible

    def check_args(self, args: Mapping[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
        """Return a line per problem in `args` and, when there is none, the function's keyword arguments."""
        kwargs = plain_kwargs(self.plain, args if type(args) is dict else dict(args))
        if kwargs is not None:
            return [], kwargs
        try:
            model = self.args_model.__pydantic_validator__.validate_python(dict(args))
        except pydantic.ValidationError as exc:
            problems = []
            for error in exc.errors(include_url=False):
                where = ".".join(str(part) for part in error["loc"]) or "(arguments)"
                problems.append(f"argument {where!r}: {error['msg']}")
            return problems, None
        kwargs = dict(model.__dict__)
        if self.accepts_extra and model.__pydantic_extra__:
            kwargs.update(model.__pydantic_extra__)
        return [], kwargs


def build_function(fn: Any, *, name: str | None, version: str, compatible: tuple[str, ...]) -> SagaFunction:
    """Return the SagaFunction of `fn`; raise TypeError or ValueError on a function that cannot be one."""
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"@registry.saga decorates an async def whose first parameter takes the saga, got {fn!r}")
    name = fn.__name__ if name is None else name
    if not isinstance(name, str) or not _NAME_RULE.match(name):
        raise ValueError(f"a saga function's name is 1 to 64 letters, digits, '_' or '-', got {name!r}")
    version, compatible = check_versions(name, version, compatible)
    owner = getattr(fn, "__qualname__", name)
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        raise TypeError(f"{owner}: its first parameter takes the saga (saga: DynamicSaga)")
    try:
        hints = _type_hints(fn)
    except TypeError:  # the saga's own annotation may be unresolvable: the arguments' are resolved one by one
        hints = {param.name: _resolve(fn, param.name, param.annotation) for param in params[1:]}
    model, accepts_extra, _ = params_model(
        f"{name}Args", owner, params[1:], hints, "a saga function's arguments are JSON values"
    )
    return SagaFunction(name, fn, model, accepts_extra, version, tuple(compatible), plain_fields(model))
