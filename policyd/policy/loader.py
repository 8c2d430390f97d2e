"""Paths -> parsed and checked policies with every diagnostic (what `policyd lint` reports).

`load_policies(paths)` reads `.policy`, `.yaml` and `.yml` files (directories recursively), parses
them (text or YAML form), checks each policy (`policyd.policy.checker`: every expression type-checked
once in its policy environment, costs estimated) and checks names across the set. Each policy comes back as a
`policyd.policy.checked.CheckedPolicy`, which the compiler consumes without checking again.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policyd import shipped
from policyd.errors import Diagnostic, IOProblem
from policyd.policy import syntax as ir
from policyd.policy.checked import CheckedPolicy
from policyd.policy.checker import PolicyChecker
from policyd.policy.composition import EffectivePolicy, compose
from policyd.policy.documents import POLICY_KIND, kinds_of
from policyd.policy.text_form import ParseResult, parse_policy_text
from policyd.policy.yaml_form import parse_policy_yaml

POLICY_SUFFIXES = (".policy", ".yaml", ".yml")


@dataclass
class LoadResult:
    """Checked policies (in path order) and every diagnostic; I/O problems are kept apart."""

    # the checked policies (in path order): what the compiler consumes
    checked: list[CheckedPolicy] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    io_errors: list[IOProblem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    # the effective policy of each profile (`policyd.policy.composition`)
    profiles: dict[str, EffectivePolicy] = field(default_factory=dict)

    @property
    def policies(self) -> list[ir.Policy]:
        """The policies, in path order."""
        return [c.policy for c in self.checked]

    @property
    def errors(self) -> list[Diagnostic]:
        """Error-severity diagnostics."""
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def has_errors(self) -> bool:
        """True when any error diagnostic was found."""
        return bool(self.errors)


def policy_files(
    paths: Sequence[str], io_errors: list[IOProblem], others: list[str] | None = None
) -> list[str]:
    """Policy files named by `paths` (directories searched recursively, sorted).

    YAML files of other kinds (test suites, configurations, misspelled kinds) found in a directory
    are skipped; with `others` given, they are listed there, explicit ones too (`policyd lint` checks
    them with `policyd.policy.documents.check_document`).
    """
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found: list[str] = []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                found.extend(os.path.join(root, f) for f in files if f.endswith(POLICY_SUFFIXES))
            for f in sorted(found):
                if not _foreign_yaml(f):
                    out.append(f)
                elif others is not None:
                    others.append(f)
        elif os.path.exists(path):
            if others is not None and _foreign_yaml(path):
                others.append(path)
            else:
                out.append(path)
        else:
            io_errors.append(IOProblem(path, "no such file or directory"))
    return out


def _foreign_yaml(path: str) -> bool:
    """True for a YAML file whose documents are of other kinds (test suites...).

    A YAML file is a policy file when any document has `kind: SchedulingPolicy` or no kind at all.
    """
    if not path.endswith((".yaml", ".yml")):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return False  # reported when it is read
    kinds = kinds_of(text)
    return bool(kinds) and POLICY_KIND not in kinds


def parse_file(path: str, text: str) -> ParseResult:
    """Parse one file by its suffix (`.yaml`/`.yml`: YAML form, anything else: text form).

    A leading byte order mark (some editors write one) is not part of the text, wherever the text came
    from: a file, a ConfigMap's value, the playground."""
    text = text.removeprefix("\ufeff")
    if path.endswith((".yaml", ".yml")):
        return parse_policy_yaml(text, path)
    return parse_policy_text(text, path)


def read_policy_files(
    paths: Sequence[str], io_errors: list[IOProblem], others: list[str] | None = None
) -> dict[str, str]:
    """The text of every policy file under `paths`, by path; problems are appended to `io_errors`.

    `others`: as for `policy_files`.
    """
    texts: dict[str, str] = {}
    for path in policy_files(paths, io_errors, others):
        try:
            with open(path, encoding="utf-8") as f:
                texts[path] = f.read()
        except FileNotFoundError:
            continue  # deleted between listing and reading (an editor's save): gone is gone
        except (OSError, UnicodeDecodeError) as e:
            io_errors.append(IOProblem(path, str(e.strerror if isinstance(e, OSError) else e)))
    return texts


def load_policies(paths: Sequence[str], others: list[str] | None = None) -> LoadResult:
    """Read, parse and check every policy under `paths` (`others`: as for `policy_files`)."""
    io_errors: list[IOProblem] = []
    result = load_texts(read_policy_files(paths, io_errors, others))
    result.io_errors[:0] = io_errors
    return result


def load_texts(texts: Mapping[str, str], scopes: Mapping[str, frozenset[str]] | None = None) -> LoadResult:
    """Parse, check and compose policy texts by name (a file path or e.g. `configmap://ns/name/key`).

    The name's suffix selects the form (`.yaml`/`.yml`: YAML, otherwise text) and names diagnostics.
    `scopes` (profile -> text names) limits each profile to its own sources (`policyd.policy.composition`).
    """
    result = LoadResult()
    for name, text in texts.items():
        result.files.append(name)
        checked = _check_file(name, text)
        result.diagnostics.extend(checked.diagnostics)
        result.checked.extend(checked.checked)
    result.diagnostics.extend(check_policy_set(result.policies))
    composition = compose(result.checked, scopes, shipped_default)
    result.diagnostics.extend(composition.diagnostics)
    result.profiles = composition.profiles
    return result


@dataclass(frozen=True)
class _CheckedFile:
    """One file's checked policies with the diagnostics that depend on that file only."""

    checked: tuple[CheckedPolicy, ...]
    diagnostics: tuple[Diagnostic, ...]


# (name, text) -> checked file: a reload re-checks only the files that changed (policies are frozen)
_FILE_CACHE: OrderedDict[tuple[str, str], _CheckedFile] = OrderedDict()
_FILE_CACHE_SIZE = 1024
_FILE_CACHE_LOCK = threading.Lock()


def _check_file(name: str, text: str) -> _CheckedFile:
    """Parse and check one file, or reuse the result for the same name and text."""
    key = (name, text)
    with _FILE_CACHE_LOCK:
        hit = _FILE_CACHE.get(key)
        if hit is not None:
            _FILE_CACHE.move_to_end(key)
            return hit
    parsed = parse_file(name, text)
    diagnostics = list(parsed.diagnostics)
    checked: list[CheckedPolicy] = []
    for policy in parsed.policies:
        checker = PolicyChecker(policy)
        checked.append(checker.run())
        diagnostics.extend(checker.diagnostics)
    entry = _CheckedFile(tuple(checked), tuple(diagnostics))
    with _FILE_CACHE_LOCK:
        _FILE_CACHE[key] = entry
        while len(_FILE_CACHE) > _FILE_CACHE_SIZE:
            _FILE_CACHE.popitem(last=False)
    return entry


def shipped_default() -> CheckedPolicy | None:
    """The shipped default.policy, checked once per text (None if it cannot be read or parsed):
    what `extends default` names when no policy `default` is loaded (`policyd.policy.composition`)."""
    path = str(shipped.default_policy())
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    checked = _check_file(path, text)
    if any(d.severity == "error" for d in checked.diagnostics) or len(checked.checked) != 1:
        return None
    return checked.checked[0]


def check_policy_set(policies: Sequence[ir.Policy]) -> list[Diagnostic]:
    """Cross-policy checks: duplicate policy names (sections and overrides: `composition.compose`).

    A policy name is unique across every loaded source, not only within a profile's: it names the
    policy in `extends`, in `POLICY/RULE` references, in explanations, events and metrics, so it must
    mean one policy whatever profile reads it (docs/LANGUAGE.md, "Names").
    """
    out: list[Diagnostic] = []
    names: dict[str, ir.Policy] = {}
    for policy in policies:
        first = names.get(policy.name.value)
        if first is not None:
            out.append(
                policy.name.diagnostic(
                    "error",
                    f"duplicate policy name {policy.name.value!r} (first defined at {first.span}); "
                    "policy names are unique across all loaded sources, whichever profiles use them",
                    "duplicate-policy",
                )
            )
        else:
            names[policy.name.value] = policy
    return out
