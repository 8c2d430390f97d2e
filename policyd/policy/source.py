"""Source files and source maps: expression offsets -> file line/column.

A `.policy` file is parsed in place, so CEL offsets already are file offsets (`SourceMap(file)`).
CEL embedded in a YAML scalar is parsed from the scalar's value; `SourceMap.for_yaml_scalar` maps
every character of that value back to the file (plain, single- and double-quoted and literal `|`
scalars exactly; folded `>` scalars as well as the folding rules allow, else approximately).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from policyd.errors import Diagnostic, Severity, SourceSpan


@dataclass(frozen=True)
class SourceFile:
    """The text of one policy file with a line table."""

    path: str
    text: str
    line_starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = [0]
        starts.extend(i + 1 for i, ch in enumerate(self.text) if ch == "\n")
        object.__setattr__(self, "line_starts", tuple(starts))

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a 0-based character offset."""
        offset = max(0, min(offset, len(self.text)))
        index = bisect.bisect_right(self.line_starts, offset) - 1
        return index + 1, offset - self.line_starts[index] + 1

    def offset(self, line: int, column: int) -> int:
        """The 0-based offset of a 1-based (line, column)."""
        line = max(1, min(line, len(self.line_starts)))
        return self.line_starts[line - 1] + column - 1

    def line_text(self, line: int) -> str:
        """The text of 1-based line `line`, without its line break."""
        if line < 1 or line > len(self.line_starts):
            return ""
        start = self.line_starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start : end if end >= 0 else len(self.text)].rstrip("\r")

    def span(self, start: int, end: int | None = None) -> SourceSpan:
        """The span of file offsets [start, end)."""
        line, column = self.position(start)
        if end is None or end <= start:
            return SourceSpan(self.path, line, column)
        end_line, end_column = self.position(end)
        return SourceSpan(self.path, line, column, end_line, end_column)

    def diagnostic(
        self, severity: Severity, message: str, start: int, end: int | None = None, code: str = ""
    ) -> Diagnostic:
        """A diagnostic at file offsets [start, end), with the source line attached."""
        span = self.span(start, end)
        return Diagnostic(severity, message, span, code, self.line_text(span.line))


@dataclass(frozen=True)
class SourceMap:
    """Maps offsets of an expression's text to offsets (and line/column) in its file.

    With `offsets` None the expression text starts at file offset `base` and is contiguous.
    Otherwise `offsets[i]` is the file offset of expression character `i` (one extra entry for the end).
    """

    file: SourceFile
    base: int = 0
    offsets: tuple[int, ...] | None = None

    def file_offset(self, offset: int) -> int:
        """The file offset of expression offset `offset`."""
        if self.offsets is None:
            return self.base + max(offset, 0)
        if not self.offsets:
            return self.base
        return self.offsets[max(0, min(offset, len(self.offsets) - 1))]

    def span(self, offset: int, end: int | None = None) -> SourceSpan:
        """The file span of expression offsets [offset, end)."""
        start = self.file_offset(offset)
        return self.file.span(start, None if end is None else self.file_offset(end))

    def diagnostic(
        self, severity: Severity, message: str, offset: int, end: int | None = None, code: str = ""
    ) -> Diagnostic:
        """A diagnostic at an expression offset."""
        start = self.file_offset(offset)
        stop = None if end is None else self.file_offset(end)
        return self.file.diagnostic(severity, message, start, stop, code)

    @classmethod
    def for_yaml_scalar(cls, file: SourceFile, node: Any) -> SourceMap:
        """The map of a YAML scalar node's value (as composed by PyYAML) to the file."""
        start = node.start_mark.index
        end = node.end_mark.index
        value: str = node.value
        style = node.style
        text = file.text
        if style in ("|", ">"):
            mapped = _block_scalar(text, start, end, folded=style == ">")
        elif style == "'":
            mapped = _flow_scalar(text, start + 1, end - 1, quote="'")
        elif style == '"':
            mapped = _flow_scalar(text, start + 1, end - 1, quote='"')
        else:
            mapped = _flow_scalar(text, start, end, quote="")
        if mapped is not None:
            chars, offsets = mapped
            produced = "".join(chars)
            if produced.startswith(value):
                kept = offsets[: len(value)]
                tail = offsets[len(value)] if len(value) < len(offsets) else end
                return cls(file, start, (*kept, tail))
        # best effort: contiguous from the first content character
        first = start + (1 if style in ("'", '"') else 0)
        if style in ("|", ">"):
            newline = text.find("\n", start)
            first = newline + 1 if newline >= 0 else start
            while first < end and text[first] == " ":
                first += 1
        return cls(file, first)


_ESCAPES = {
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "t": "\t",
    "\t": "\t",
    "n": "\n",
    "v": "\v",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _flow_scalar(text: str, start: int, end: int, quote: str) -> tuple[list[str], list[int]] | None:
    """Characters of a plain or quoted scalar in text[start:end] with their file offsets."""
    chars: list[str] = []
    offsets: list[int] = []
    i = start
    while i < end:
        ch = text[i]
        if quote == "'" and ch == "'" and i + 1 < end and text[i + 1] == "'":
            chars.append("'")
            offsets.append(i)
            i += 2
        elif quote == '"' and ch == "\\":
            if i + 1 >= end:
                return None
            esc = text[i + 1]
            if esc in _HEX_ESCAPES:
                width = _HEX_ESCAPES[esc]
                try:
                    chars.append(chr(int(text[i + 2 : i + 2 + width], 16)))
                except ValueError:
                    return None
                offsets.append(i)
                i += 2 + width
            elif esc == "\n":
                i += 2
                while i < end and text[i] in " \t":
                    i += 1
            elif esc in _ESCAPES:
                chars.append(_ESCAPES[esc])
                offsets.append(i)
                i += 2
            else:
                return None
        elif ch in "\r\n":
            # line folding: trailing blanks dropped, a single break becomes a space, n breaks n-1 newlines
            while chars and chars[-1] in " \t":
                chars.pop()
                offsets.pop()
            breaks = 0
            j = i
            while j < end and text[j] in " \t\r\n":
                if text[j] == "\n":
                    breaks += 1
                j += 1
            if breaks <= 1:
                chars.append(" ")
                offsets.append(i)
            else:
                for _ in range(breaks - 1):
                    chars.append("\n")
                    offsets.append(i)
            i = j
        else:
            chars.append(ch)
            offsets.append(i)
            i += 1
    offsets.append(end)
    return chars, offsets


def _block_scalar(text: str, start: int, end: int, folded: bool) -> tuple[list[str], list[int]] | None:
    """Characters of a `|` or `>` block scalar (header at `start`) with their file offsets."""
    header_end = text.find("\n", start)
    if header_end < 0:
        return None
    header = text[start:header_end].split("#", 1)[0].strip()
    explicit = next((int(c) for c in header if c.isdigit()), None)
    pos = header_end + 1
    lines: list[tuple[int, int]] = []  # (line start, line end) of each content line
    while pos <= end and pos < len(text):
        nl = text.find("\n", pos)
        line_end = nl if nl >= 0 else len(text)
        lines.append((pos, line_end))
        if nl < 0:
            break
        pos = nl + 1
    indent = None
    for ls, le in lines:
        body = text[ls:le]
        if body.strip():
            indent = len(body) - len(body.lstrip(" "))
            break
    if explicit is not None:
        # the explicit indicator is relative to the parent's indentation; approximate with the first line
        indent = indent if indent is not None else explicit
    if indent is None:
        return [], [end]
    chars: list[str] = []
    offsets: list[int] = []
    previous_blank = True
    for n, (ls, le) in enumerate(lines):
        body = text[ls:le].rstrip("\r")
        blank = not body.strip()
        if not blank and len(body) - len(body.lstrip(" ")) < indent:
            break
        content_start = ls + min(indent, len(body))
        content = text[content_start : ls + len(body)]
        if folded and n > 0 and chars and chars[-1] == "\n" and not blank and not previous_blank:
            if not content.startswith((" ", "\t")):
                chars[-1] = " "
        for k, ch in enumerate(content):
            chars.append(ch)
            offsets.append(content_start + k)
        chars.append("\n")
        offsets.append(ls + len(body))
        previous_blank = blank or content.startswith((" ", "\t"))
    offsets.append(offsets[-1] if offsets else end)
    return chars, offsets
