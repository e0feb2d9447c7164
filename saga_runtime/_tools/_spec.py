"""ToolSpec: a registered tool, its options and its argument model."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic

from saga_runtime._tools._context import StepContext
from saga_runtime._tools._retry import DEFAULT_COMPENSATION_RETRY, NO_RETRY, RetryPolicy
from saga_runtime._tools._secrets import secret_paths
from saga_runtime._tools._versions import check_versions

__all__ = ["RetryScope", "ToolSpec", "build_spec"]

RetryScope = Literal["saga", "step"]

# OpenAI's and Anthropic's rule for function names.
_NAME_RULE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_ARGS_CONFIG = pydantic.ConfigDict(
    extra="forbid",
    # Allow parameters named `model_*`.
    protected_namespaces=(),
)
# For an execute(**kwargs).
_ARGS_CONFIG_EXTRA = pydantic.ConfigDict(extra="allow", protected_namespaces=())


@dataclass(frozen=True, slots=True, eq=False)
class ToolSpec:
    """What the engine needs to call one tool."""

    name: str
    instance: Any
    execute: Callable[..., Any]
    compensate: Callable[..., Any] | None
    execute_is_async: bool
    compensate_is_async: bool
    execute_ctx_params: tuple[str, ...]
    compensate_ctx_params: tuple[str, ...]
    args_model: type[pydantic.BaseModel]
    accepts_extra: bool
    retry: RetryPolicy = NO_RETRY
    retry_scope: RetryScope = "saga"
    timeout: float | None = None
    compensation_retry: RetryPolicy = DEFAULT_COMPENSATION_RETRY
    irreversible: bool = False
    description: str = ""
    # Every call waits for a person's decision, at most approval_timeout seconds.
    approval: bool = False
    approval_timeout: float | None = None
    _field_names: tuple[str, ...] = field(default=(), repr=False)
    # Checks of execute's result.
    result_adapter: pydantic.TypeAdapter[Any] | None = field(default=None, repr=False)
    # A plain scalar annotation: a result of exactly that type passes unchecked.
    result_exact: type | None = field(default=None, repr=False)
    validate_result: Callable[..., Any] | None = field(default=None, repr=False)
    validate_is_async: bool = False
    # Where secret arguments stand (see `_secrets`).
    secrets: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # The version steps record, and older ones this code can resume.
    version: str = "1"
    compatible: tuple[str, ...] = ()
    # Whether a step of unknown outcome had its effect (execute's parameters).
    reconcile: Callable[..., Any] | None = field(default=None, repr=False)
    reconcile_is_async: bool = False
    reconcile_ctx_params: tuple[str, ...] = ()
    # The argument model's fields when each is plain (see `plain_fields`): their arguments are checked here, not by
    # pydantic; None when any field is not.
    plain: Mapping[str, tuple[frozenset[type] | None, Any]] | None = field(default=None, repr=False)

    def accepts(self, version: str) -> bool:
        """Tell whether this tool can resume a step recorded under `version`."""
        return version == self.version or version in self.compatible

    @property
    def has_compensate(self) -> bool:
        """Tell whether the tool can undo its effect."""
        return self.compensate is not None

    @property
    def args_schema(self) -> dict[str, Any]:
        """Return the JSON schema of the tool's arguments."""
        return self.args_model.model_json_schema()

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Return `execute`'s kwargs, validated (else `ValidationError`)."""
        kwargs = plain_kwargs(self.plain, args)
        if kwargs is not None:
            return kwargs
        return self._kwargs(self.args_model.__pydantic_validator__.validate_python(args))

    def valid_args(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """Return `validate_args(args)`, or None if invalid."""
        try:
            model = self.args_model.__pydantic_validator__.validate_python(args)
        except pydantic.ValidationError:
            return None
        return self._kwargs(model) if self.accepts_extra else dict(model.__dict__)

    def _kwargs(self, model: pydantic.BaseModel) -> dict[str, Any]:
        # __dict__ holds exactly the fields, in order; extras live apart.
        kwargs = dict(model.__dict__)
        if self.accepts_extra and model.__pydantic_extra__:
            kwargs.update(model.__pydantic_extra__)
        return kwargs

    def check_args(self, args: Mapping[str, Any], *, deferred: frozenset[str] = frozenset()) -> list[str]:
        """Return a line per problem; `deferred` (`$ref`) args are only checked to exist."""
        return self.checked_args(args, deferred=deferred)[0]

    def checked_args(
        self, args: Mapping[str, Any], *, deferred: frozenset[str] = frozenset()
    ) -> tuple[list[str], dict[str, Any] | None]:
        """Return `check_args`'s problems and, if clean and nothing deferred, the kwargs."""
        problems: list[str] = []
        if deferred and not self.accepts_extra:
            unknown = sorted(deferred.difference(self._field_names))
            problems.extend(f"argument {name!r}: Extra inputs are not permitted" for name in unknown)
        if deferred or type(args) is not dict:
            args = {k: v for k, v in args.items() if k not in deferred}
        try:
            model = self.args_model.__pydantic_validator__.validate_python(args)
        except pydantic.ValidationError as exc:
            for error in exc.errors(include_url=False):
                loc = error["loc"]
                if loc and loc[0] in deferred and error["type"] == "missing":
                    continue
                where = ".".join(str(part) for part in loc) or "(arguments)"
                problems.append(f"argument {where!r}: {error['msg']}")
            return problems, None
        return problems, None if problems or deferred else self._kwargs(model)


_NOT_A_FIELD: Any = (object(), None)
_REQUIRED: Any = object()
# The types a plain field may take: a value of exactly one of them passes pydantic's lax mode unchanged.
_PLAIN_TYPES = frozenset({int, str, float, bool})
# The settings of an argument model (`params_model`) that change no valid value.
_PLAIN_CONFIG = frozenset({"extra", "protected_namespaces", "hide_input_in_errors", "title"})
_VALIDATORS = ("validators", "field_validators", "root_validators", "model_validators")


def plain_fields(model: type[pydantic.BaseModel]) -> dict[str, tuple[frozenset[type] | None, Any]] | None:
    """Return each field of an argument model, by name, as (the exact types of a value it keeps unchanged, None for
    any value; its default or `_REQUIRED`), when every field is plain: `Any`, int, str, float or bool, or one of
    those or None, with no alias, constraint or validator, and a default (if any) of a JSON scalar that is not
    validated (`validate_default`). Else None."""
    decorators = model.__pydantic_decorators__
    if any(getattr(decorators, kind) for kind in _VALIDATORS) or not _PLAIN_CONFIG.issuperset(model.model_config):
        return None
    plain: dict[str, tuple[frozenset[type] | None, Any]] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if (
            info.metadata
            or info.alias
            or info.validation_alias
            or info.default_factory is not None
            or info.validate_default  # (its default goes through validation: pydantic converts or refuses it)
        ):
            return None
        taken: frozenset[type] | None
        if annotation is Any:
            taken = None
        elif annotation in _PLAIN_TYPES:
            taken = frozenset({annotation})
        else:
            members = typing.get_args(annotation)
            origin = typing.get_origin(annotation)
            if (
                origin not in (typing.Union, types.UnionType)
                or len(members) != 2
                or type(None) not in members
                or not all(member in _PLAIN_TYPES or member is type(None) for member in members)
            ):
                return None
            taken = frozenset(members)
        if info.is_required():
            default = _REQUIRED
        elif type(info.default) in _PLAIN_TYPES or info.default is None:
            default = info.default
        else:
            return None
        plain[name] = (taken, default)
    return plain


def plain_kwargs(
    plain: Mapping[str, tuple[frozenset[type] | None, Any]] | None, args: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Return the kwargs pydantic would make of `args` for a model of `plain` fields (`plain_fields`), when each value
    is of exactly a type its field takes (lax mode converts nothing of its own type, and no constraint or validator
    applies) and no name is missing or unknown; else None: pydantic decides (its errors, its conversions)."""
    if plain is None or type(args) is not dict or len(args) > len(plain):
        return None
    for name, value in args.items():
        taken = plain.get(name, _NOT_A_FIELD)
        if taken is _NOT_A_FIELD or (taken[0] is not None and type(value) not in taken[0]):
            return None
    if len(args) == len(plain):
        return dict(args)
    kwargs = {}
    for name, (_, default) in plain.items():
        if name in args:
            kwargs[name] = args[name]
        elif default is _REQUIRED:
            return None
        else:
            kwargs[name] = default
    return kwargs


def _resolve(fn: Callable[..., Any], name: str, annotation: Any) -> Any:
    """Return a parameter's annotation evaluated, else raise `TypeError`."""
    if not isinstance(annotation, str):
        return annotation
    if annotation.rsplit(".", 1)[-1] == "StepContext":
        return StepContext
    try:
        return eval(annotation, dict(getattr(fn, "__globals__", {})))
    except Exception as exc:
        owner = getattr(fn, "__qualname__", repr(fn))
        raise TypeError(
            f"{owner}: the annotation {annotation!r} of parameter {name!r} cannot be resolved ({exc}); define the "
            "type at module level so its arguments can be validated"
        ) from None


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        # One at a time, to name the faulty one and keep the others' validation.
        raw = dict(getattr(fn, "__annotations__", {}))
        raw.pop("return", None)
        return {name: _resolve(fn, name, annotation) for name, annotation in raw.items()}


def _is_context(annotation: Any) -> bool:
    """Tell whether a parameter asks for the StepContext."""
    if annotation is StepContext:
        return True
    if isinstance(annotation, str):
        return annotation.rsplit(".", 1)[-1] == "StepContext"
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_context(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return len(members) == 1 and _is_context(members[0])
    return False


def _context_params(
    fn: Callable[..., Any],
) -> tuple[tuple[str, ...], list[inspect.Parameter], dict[str, Any]]:
    hints = _type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())
    ctx = tuple(p.name for p in params if _is_context(hints.get(p.name, p.annotation)))
    return ctx, [p for p in params if p.name not in ctx], hints


def _args_model(tool_name: str, owner: str, execute: Callable[..., Any]) -> tuple[Any, ...]:
    ctx, params, hints = _context_params(execute)
    advice = (
        "tool arguments must be JSON-like values or pydantic models. Pass dependencies (clients, connections) to "
        "the tool's constructor and register the instance with registry.register(instance)"
    )
    return (ctx, *params_model(f"{tool_name}Args", f"{owner}.execute", params, hints, advice))


def params_model(
    model_name: str, where: str, params: list[inspect.Parameter], hints: dict[str, Any], advice: str
) -> tuple[type[pydantic.BaseModel], bool, tuple[str, ...]]:
    """Return the argument model of a callable's parameters (passed by name), whether it takes extra ones
    (`**kwargs`), and their names; raise TypeError naming `where` for a parameter that cannot be an argument."""
    fields: dict[str, Any] = {}
    accepts_extra = False
    for param in params:
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            accepts_extra = True
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            raise TypeError(
                f"{where}: parameter {param.name!r} is positional-only or *args; arguments are passed by name, so "
                "declare it as a normal or keyword-only parameter"
            )
        if param.name.startswith("_"):
            raise TypeError(
                f"{where}: parameter {param.name!r} starts with an underscore, which cannot be an argument; rename it"
            )
        annotation = hints.get(param.name, Any)
        if annotation is inspect.Parameter.empty or isinstance(annotation, str):
            annotation = Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    config = _ARGS_CONFIG_EXTRA if accepts_extra else _ARGS_CONFIG
    try:
        model = pydantic.create_model(model_name, __config__=config, **fields)
        if secret_paths(model):
            # Errors are stored and shown: never quote a secret.
            hidden = pydantic.ConfigDict(**{**config, "hide_input_in_errors": True})
            model = pydantic.create_model(model_name, __config__=hidden, **fields)
    except pydantic.PydanticSchemaGenerationError as exc:
        raise TypeError(f"{where} has an argument type pydantic cannot validate ({exc}); {advice}") from exc
    return model, accepts_extra, tuple(fields)


def _compensate_ctx(owner: str, compensate: Callable[..., Any]) -> tuple[str, ...]:
    ctx, params, _ = _context_params(compensate)
    positional = [
        p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in params if p.default is inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD]
    has_var = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    if not (positional or has_var) or len(required) > 1:
        raise TypeError(
            f"{owner}.compensate must take exactly one argument, the result of execute (plus, optionally, a "
            "parameter annotated StepContext)"
        )
    return ctx


def _method(instance: Any, attr: str) -> Callable[..., Any] | None:
    method = getattr(instance, attr, None)
    if method is None:
        return None
    if not callable(method):
        raise TypeError(f"{type(instance).__name__}.{attr} must be a method, got {type(method).__name__}")
    if inspect.isasyncgenfunction(method) or inspect.isgeneratorfunction(method):
        raise TypeError(f"{type(instance).__name__}.{attr} must return a value, not be a generator")
    return typing.cast("Callable[..., Any]", method)


def build_spec(
    instance: Any,
    *,
    name: str,
    retry: RetryPolicy | None = None,
    retry_scope: RetryScope = "saga",
    timeout: float | None = None,
    compensation_retry: RetryPolicy | None = None,
    irreversible: bool = False,
    approval: bool = False,
    approval_timeout: float | None = None,
    version: str = "1",
    compatible: tuple[str, ...] = (),
) -> ToolSpec:
    """Return a tool instance's spec, or raise `TypeError`/`ValueError`."""
    owner = type(instance).__name__
    if not isinstance(name, str) or not _NAME_RULE.match(name):
        raise ValueError(
            f"tool name {name!r} is not allowed: use 1 to 64 letters, digits, '_' or '-' (the rule LLM providers "
            "apply to function names)"
        )
    execute = _method(instance, "execute")
    if execute is None:
        raise TypeError(f"{owner} cannot be a tool: it has no execute() method")
    compensate = _method(instance, "compensate")
    if retry_scope not in ("saga", "step"):
        raise ValueError(f"retry_scope must be 'saga' or 'step', got {retry_scope!r}")
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise ValueError(f"timeout is in seconds and must be positive, got {timeout!r}")
    if approval_timeout is not None and (
        isinstance(approval_timeout, bool) or not isinstance(approval_timeout, int | float) or not approval_timeout > 0
    ):
        raise ValueError(f"approval_timeout is in seconds and must be positive, got {approval_timeout!r}")
    for label, policy in (("retry", retry), ("compensation_retry", compensation_retry)):
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise TypeError(f"{label} must be a RetryPolicy, got {type(policy).__name__}")
    version, compatible = check_versions(owner, version, compatible)
    ctx, model, accepts_extra, field_names = _args_model(name, owner, execute)
    reconcile = _method(instance, "reconcile")
    validate = _method(instance, "validate")
    compensate_ctx = _compensate_ctx(owner, compensate) if compensate is not None else ()
    doc = inspect.getdoc(type(instance)) or inspect.getdoc(execute) or ""
    if doc == inspect.getdoc(object):
        doc = ""
    return ToolSpec(
        name=name,
        instance=instance,
        execute=execute,
        compensate=compensate,
        execute_is_async=inspect.iscoroutinefunction(execute),
        compensate_is_async=compensate is not None and inspect.iscoroutinefunction(compensate),
        execute_ctx_params=ctx,
        compensate_ctx_params=compensate_ctx,
        args_model=model,
        accepts_extra=accepts_extra,
        plain=plain_fields(model),
        retry=retry or NO_RETRY,
        retry_scope=retry_scope,
        timeout=timeout,
        compensation_retry=compensation_retry or DEFAULT_COMPENSATION_RETRY,
        irreversible=irreversible,
        description=doc,
        approval=bool(approval),
        approval_timeout=None if approval_timeout is None else float(approval_timeout),
        _field_names=field_names,
        result_adapter=_result_adapter(owner, execute),
        result_exact=_result_exact(execute),
        validate_result=validate,
        validate_is_async=validate is not None and inspect.iscoroutinefunction(validate),
        secrets=secret_paths(model),
        version=version,
        compatible=compatible,
        reconcile=reconcile,
        reconcile_is_async=reconcile is not None and inspect.iscoroutinefunction(reconcile),
        reconcile_ctx_params=_context_params(reconcile)[0] if reconcile is not None else (),
    )


# Instances of arbitrary classes are checked with isinstance.
_RESULT_CONFIG = pydantic.ConfigDict(arbitrary_types_allowed=True)
# Their adapters return a value of exactly that type unchanged.
_EXACT = frozenset({int, str, float, bool})


def _result_exact(execute: Callable[..., Any]) -> type | None:
    annotation = _type_hints(execute).get("return")
    return annotation if type(annotation) is type and annotation in _EXACT else None


def _result_adapter(owner: str, execute: Callable[..., Any]) -> pydantic.TypeAdapter[Any] | None:
    """Return the adapter checking execute's result, if annotated."""
    annotation = _type_hints(execute).get("return", inspect.Signature.empty)
    if annotation is inspect.Signature.empty or annotation is Any or isinstance(annotation, str):
        return None
    try:
        try:
            return pydantic.TypeAdapter(annotation, config=_RESULT_CONFIG)
        except pydantic.PydanticUserError:  # a model brings its own config
            return pydantic.TypeAdapter(annotation)
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
        raise TypeError(
            f"{owner}.execute's return annotation {annotation!r} cannot be checked by pydantic ({exc}); annotate "
            "a JSON-like type, a pydantic model or a dataclass, or leave it out"
        ) from exc
