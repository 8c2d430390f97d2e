"""Bounded execution of a playground request: each one in a child process, killed when it runs too long.

A thread cannot be stopped, a process can: lint and run requests execute in a process forked from a
`forkserver` (which imported policyd once, so a request starts in milliseconds), at most `workers`
at a time. A request over its time limit is killed (`WorkerTimeout`); one that finds every worker busy
is refused at once (`WorkerBusy`). Only the operations the server was built with can run (by name).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from policyd.playground import session

# seconds a child that sent its answer has to exit before it is killed
_EXIT_GRACE = 5.0
# what the child runs on a request's JSON document: a module-level function (the child gets it by name)
Operation = Callable[[Any], dict[str, Any]]


class WorkerTimeout(Exception):
    """The request ran longer than its limit and was stopped."""


class WorkerBusy(Exception):
    """Every worker is busy."""


class WorkerFailed(Exception):
    """The child died or raised something other than a RequestError."""


def _child(operation: Operation, doc: Any, conn: Connection) -> None:
    """In the child: run the operation, send ("ok", result), ("refused", error body) or ("failed", text)."""
    try:
        conn.send(("ok", operation(doc)))
    except session.RequestError as err:
        conn.send(("refused", err.to_json()))
    except Exception as err:  # reported to the page, not a traceback: the page shows the message
        conn.send(("failed", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


class Workers:
    """At most `count` child processes at a time, each stopped after its operation's time limit.

    `operations`: name -> (function, seconds it may take).
    """

    def __init__(self, count: int, operations: Mapping[str, tuple[Operation, float]]) -> None:
        self._slots = threading.BoundedSemaphore(count)
        self._operations = dict(operations)
        self._context = multiprocessing.get_context("forkserver")
        # the child starts with the operations' modules imported (policyd's compiler among them)
        self._context.set_forkserver_preload(sorted({f.__module__ for f, _ in self._operations.values()}))

    def call(self, name: str, doc: Any) -> dict[str, Any]:
        """The operation's result; RequestError, WorkerTimeout, WorkerBusy or WorkerFailed otherwise."""
        if name not in self._operations:
            raise WorkerFailed(f"no operation {name!r}")
        if not self._slots.acquire(blocking=False):
            raise WorkerBusy("every playground worker is busy; try again when a run has finished")
        try:
            return self._call(name, *self._operations[name], doc)
        finally:
            self._slots.release()

    def _call(self, name: str, operation: Operation, timeout: float, doc: Any) -> dict[str, Any]:
        receive, send = self._context.Pipe(duplex=False)
        process = self._context.Process(target=_child, args=(operation, doc, send), daemon=True)
        process.start()
        send.close()
        try:
            if not receive.poll(timeout):
                process.kill()
                raise WorkerTimeout(
                    f"the {name} took longer than {timeout:g} s and was stopped "
                    "(a smaller cluster or a cheaper policy runs faster)"
                )
            try:
                status, body = receive.recv()
            except EOFError:
                process.join()
                raise WorkerFailed(f"the {name} worker exited with code {process.exitcode}") from None
        finally:
            receive.close()
            process.join(_EXIT_GRACE)
            if process.is_alive():
                process.kill()
                process.join()
        if status == "refused":
            raise session.RequestError(body["error"], tuple(body["diagnostics"]))
        if status == "failed":
            raise WorkerFailed(body)
        return body  # type: ignore[no-any-return]
