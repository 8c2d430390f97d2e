"""The policyd error hierarchy and source-positioned diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class SourceSpan:
    """A place in a source file: 1-based line and column, optional end; line 0: the source as a whole,
    for a problem that has no place in it (`unplaced`)."""

    file: str = "<input>"
    line: int = 1
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None

    @property
    def placed(self) -> bool:
        """Whether the span names a line and column."""
        return self.line > 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}" if self.placed else self.file


@dataclass(frozen=True)
class Diagnostic:
    """One lint/compile finding at a source position."""

    severity: Severity
    message: str
    span: SourceSpan
    code: str = ""
    source_line: str | None = None

    def format(self) -> str:
        """Render as `file:line:col: severity: message`, then the source line and a caret."""
        head = f"{self.span}: {self.severity}: {self.message}"
        if self.source_line is None:
            return head
        caret = " " * (max(self.span.column, 1) - 1) + "^"
        width = 1
        if self.span.end_line == self.span.line and self.span.end_column:
            width = max(1, self.span.end_column - self.span.column)
        caret = caret + "~" * (width - 1)
        return f"{head}\n{self.source_line.rstrip()}\n{caret}"

    def to_json(self) -> dict[str, object]:
        """The `--format json` shape of this diagnostic."""
        placed = self.span.placed
        return {
            "file": self.span.file,
            "line": self.span.line if placed else None,
            "column": self.span.column if placed else None,
            "endLine": self.span.end_line,
            "endColumn": self.span.end_column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
        }


POLICIES = "<policies>"  # the source named by a problem of the policy set as a whole


def unplaced(message: str, code: str = "io", source: str = POLICIES) -> Diagnostic:
    """An error of `source` with no line or column in it (a file that cannot be read, a ConfigMap
    that is missing, a configured profile no policy declares)."""
    return Diagnostic("error", message, SourceSpan(source, 0, 0), code)


@dataclass(frozen=True)
class IOProblem:
    """A source that could not be read (a path, a ConfigMap) and what went wrong; printed
    `source: problem`."""

    source: str
    problem: str

    def __str__(self) -> str:
        return f"{self.source}: {self.problem}"

    def diagnostic(self) -> Diagnostic:
        """The problem as an unplaced error of its source."""
        return unplaced(self.problem, "io", self.source)


class PolicydError(Exception):
    """Root of every error policyd raises on purpose."""


class PolicyError(PolicydError):
    """A policy failed to parse, validate, type-check or compile; carries diagnostics."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        super().__init__("\n".join(d.format() for d in self.diagnostics))

    @property
    def errors(self) -> list[Diagnostic]:
        """Only the error-severity diagnostics."""
        return [d for d in self.diagnostics if d.severity == "error"]


def error_text(exc: BaseException) -> str:
    """`exc` as a command prints it after its name: a PolicyError's diagnostics already say `error:`
    (`file:line:col: error: ...`), anything else is prefixed with it."""
    return str(exc) if isinstance(exc, PolicyError) else f"error: {exc}"


class CelError(PolicydError):
    """A CEL expression failed to parse or type-check (positions relative to the expression)."""

    def __init__(self, message: str, offset: int = 0, line: int = 1, column: int = 1):
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.line = line
        self.column = column


class CelEvalError(PolicydError):
    """A CEL runtime error (division by zero, overflow, no such key, no matching overload...)."""


class ConfigError(PolicydError):
    """The policyd configuration file is invalid; the message names the failing path."""


class ClusterDataError(PolicydError):
    """A cluster object (from a file or the API) could not be understood."""


@dataclass
class DiagnosticSink:
    """Collects diagnostics while a policy set is checked."""

    items: list[Diagnostic] = field(default_factory=list)

    def add(self, diagnostic: Diagnostic) -> None:
        """Record one diagnostic."""
        self.items.append(diagnostic)

    @property
    def has_errors(self) -> bool:
        """True when any recorded diagnostic is an error."""
        return any(d.severity == "error" for d in self.items)
