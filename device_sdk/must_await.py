"""`must_await`: async methods whose coroutine, if it is never awaited, says so loudly.

Calling `client.run_forever()` from plain code returns a coroutine that does nothing; Python's own notice
("coroutine … was never awaited") is a RuntimeWarning that is easy to miss and the program exits 0. A
method decorated with `must_await` returns a coroutine object that behaves exactly like the native one
(await it, `asyncio.run` it, `asyncio.create_task` it) but, when it is dropped without ever running, logs
an ERROR (shown on stderr even without logging configured) naming the method and how to call it instead.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine, Generator
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("device_sdk")
P = ParamSpec("P")
T = TypeVar("T")


class _Checked(Coroutine[Any, Any, T]):
    __slots__ = ("_coro", "_name", "_hint", "_started", "__name__", "__qualname__")

    def __init__(self, coro: Coroutine[Any, Any, T], name: str, hint: str) -> None:
        self._coro = coro
        self._name = name
        self._hint = hint
        self._started = False
        self.__name__ = self.__qualname__ = name  # what asyncio shows for a task running it

    def __await__(self) -> Generator[Any, None, T]:
        self._started = True
        return self._coro.__await__()

    def send(self, value: Any) -> Any:
        self._started = True
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        self._started = True
        return self._coro.throw(*args)

    def close(self) -> None:
        self._started = True
        self._coro.close()

    def __del__(self) -> None:
        if not self._started:
            self._coro.close()  # ours replaces Python's "never awaited" warning
            try:
                log.error("%s() is a coroutine function and was called without being awaited, so it did nothing. %s",
                          self._name, self._hint)
            except Exception:  # interpreter shutting down
                pass


def must_await(hint: str) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """Decorate an async method so an unawaited call is reported with `hint` (how to call it instead)."""

    def wrap(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        name = fn.__qualname__

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T]:
            return _Checked(fn(*args, **kwargs), name, hint)

        return call

    return wrap


__all__ = ["must_await"]
