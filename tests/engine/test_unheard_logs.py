"""Log records nobody hears are not built: the library's NullHandler alone hears nothing (issue 34)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from saga_runtime import SagaExecutor, SagaStatus, ToolRegistry
from saga_runtime._engine._events import heard

registry = ToolRegistry()


@registry.tool
class Undoable:
    async def execute(self, n: int) -> int:
        return n

    async def compensate(self, result: int) -> None:
        return None


@registry.tool
class Fails:
    async def execute(self, n: int) -> int:
        raise RuntimeError("no")


class Collect(logging.Handler):
    """Keep the messages handed to it."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def library_alone() -> Iterator[logging.Logger]:
    """The library's logger with its own NullHandler only (pytest's capture handlers and the root's taken off)."""
    log = logging.getLogger("saga_runtime")
    propagate, handlers = log.propagate, list(log.handlers)
    log.propagate = False
    log.handlers[:] = [handler for handler in handlers if type(handler) is logging.NullHandler]
    try:
        yield log
    finally:
        log.propagate = propagate
        log.handlers[:] = handlers


@pytest.fixture
def built() -> Iterator[list[str]]:
    """The messages of every saga_runtime log record built while the test runs."""
    names: list[str] = []
    make = logging.getLogRecordFactory()

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if record.name == "saga_runtime":
            names.append(record.getMessage())
        return record

    logging.setLogRecordFactory(counting)
    try:
        yield names
    finally:
        logging.setLogRecordFactory(make)


async def _failing_saga() -> None:
    result = await SagaExecutor(registry).run(
        [{"tool": "Undoable", "args": {"n": 1}}, {"tool": "Fails", "args": {"n": 2}}]
    )
    assert result.status is SagaStatus.COMPENSATED


async def test_a_failure_heard_by_nobody_builds_no_record(built: list[str]) -> None:
    """With only the library's NullHandler, a failing saga builds no warning record."""
    with library_alone() as library:
        assert [type(h) for h in library.handlers] == [logging.NullHandler]
        await _failing_saga()
    assert not [message for message in built if "failed" in message or "ended" in message]


async def test_a_failure_is_logged_once_a_handler_listens() -> None:
    """A handler on the library's logger gets the step's failure and the saga's end, as before."""
    handler = Collect()
    with library_alone() as library:
        library.addHandler(handler)
        await _failing_saga()
    assert any("failed: RuntimeError" in message for message in handler.messages)
    assert any("ended COMPENSATED" in message for message in handler.messages)


def test_heard_follows_handlers_levels_and_the_last_resort() -> None:
    """heard(): a real handler at or below the level hears; a NullHandler does not; no handler: the last resort."""
    log = logging.getLogger("saga_runtime_test_heard")
    log.propagate, log.level = False, logging.DEBUG
    try:
        assert heard(log, logging.WARNING)  # no handler at all: logging's last resort prints warnings
        assert not heard(log, logging.INFO)  # ...and nothing below them
        log.addHandler(logging.NullHandler())
        assert not heard(log, logging.WARNING)
        loud = Collect()
        loud.setLevel(logging.ERROR)
        log.addHandler(loud)
        assert not heard(log, logging.WARNING)
        assert heard(log, logging.ERROR)
        log.setLevel(logging.CRITICAL)
        assert not heard(log, logging.ERROR)  # the logger's own level first
    finally:
        log.handlers.clear()
