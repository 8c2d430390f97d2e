"""Brackets and strings of a `.policy` file: the first one never closed, for syntax errors that show up later.

An unclosed `(` is noticed by the parser only at the next statement, often lines below. Like Python
3.10+ ("'(' was never closed"), the text form reports where the delimiter was opened: `scan`
scans the text (skipping `#` and `//` comments and the inside of strings): the brackets still open
where the parser stopped, whether the whole text is balanced, and the first string literal not
terminated on its line (triple-quoted ones may span lines).
"""

from __future__ import annotations

from dataclasses import dataclass

PAIRS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {v: k for k, v in PAIRS.items()}


@dataclass(frozen=True)
class Scan:
    """Delimiters of a text up to a stop offset: those still open there, and what the whole text shows."""

    # (opener, offset) of the brackets open at the stop offset, outermost first
    open: tuple[tuple[str, int], ...]
    # offset and quote of the first string literal not terminated (anywhere in the text), or None
    unterminated: tuple[str, int] | None
    # True when every bracket of the whole text is closed by its own closer
    balanced: bool

    def innermost(self) -> tuple[str, int] | None:
        """The innermost bracket open at the stop offset."""
        return self.open[-1] if self.open else None


def _string_end(text: str, start: int, quote: str, raw: bool) -> int | None:
    """The offset after the string literal whose quote(s) start at `start`, or None when unterminated."""
    i = start + len(quote)
    while i < len(text):
        if not raw and text[i] == "\\":
            i += 2
            continue
        if text.startswith(quote, i):
            return i + len(quote)
        if len(quote) == 1 and text[i] == "\n":
            return None
        i += 1
    return None


def scan(text: str, stop: int) -> Scan:
    """Scan `text` (skipping comments and strings): brackets open at `stop`, strings, balance."""
    stack: list[tuple[str, int]] = []
    at_stop: tuple[tuple[str, int], ...] | None = None
    balanced = True
    i = 0
    while i < len(text):
        if at_stop is None and i >= stop:
            at_stop = tuple(stack)
        ch = text[i]
        if ch == "#" or text.startswith("//", i):
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline + 1
            continue
        if ch in "\"'":
            before = text[max(0, i - 2) : i].lower()
            raw = before.endswith("r") and (len(before) < 2 or before[0] == "b" or not before[0].isalnum())
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            end = _string_end(text, i, quote, raw)
            if end is None:
                return Scan(at_stop if at_stop is not None else tuple(stack), (quote, i), False)
            i = end
            continue
        if ch in PAIRS:
            stack.append((ch, i))
        elif ch in CLOSERS:
            if stack and stack[-1][0] == CLOSERS[ch]:
                stack.pop()
            else:
                balanced = False
        i += 1
    return Scan(at_stop if at_stop is not None else tuple(stack), None, balanced and not stack)
