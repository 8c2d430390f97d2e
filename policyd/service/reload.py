"""Hot reload of policies from files and ConfigMaps, safe under bad input.

Sources hold policy texts by name (a file path, or `configmap://ns/name/key`). Any change requests a
reload; a worker thread debounces requests, reads every source, and compiles the whole new set off
the scheduling thread. A set that parses, type-checks and passes lint replaces the old one through
`on_swap` (the Scheduler applies it between two cycles); any error keeps the last good set, and is
logged with file:line:col, counted, and kept for `/readyz?verbose`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from policyd import lifecycle
from policyd.compiler.profiles import compile_sources
from policyd.compiler.profiles import texts_hash as content_hash
from policyd.errors import Diagnostic, IOProblem, PolicydError, PolicyError, unplaced
from policyd.framework import CompiledPolicySet
from policyd.policy.loader import POLICY_SUFFIXES, read_policy_files

log = logging.getLogger(__name__)

CONFIGMAP_SCHEME = "configmap://"


class PolicySource(Protocol):
    """Something that holds policy texts by name and tells when they change."""

    def read(self) -> dict[str, str]:
        """Every policy text of the source, by name."""
        ...

    def describe(self) -> str:
        """A short human name for logs."""
        ...


class FileSource:
    """Policy files and directories on disk, watched with watchdog."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = [os.path.abspath(p) for p in paths]
        self._observer: Any = None

    def describe(self) -> str:
        """The watched paths."""
        return ", ".join(self.paths)

    def read(self) -> dict[str, str]:
        """Every policy file under the paths; a missing path or unreadable file is an error."""
        problems: list[IOProblem] = []
        texts = read_policy_files(self.paths, problems)
        if problems:
            raise PolicyError([p.diagnostic() for p in problems])
        return texts

    def watch(self, notify: Callable[[str], None]) -> None:
        """Call `notify(path)` on every create, modify, delete or move under the paths."""
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        watched = self.paths

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return
                for raw in (event.src_path, getattr(event, "dest_path", "")):
                    path = os.fsdecode(raw) if raw else ""
                    if path and _relevant(path, watched):
                        notify(path)
                        return

        observer = Observer()
        dirs = {p if os.path.isdir(p) else os.path.dirname(p) for p in self.paths}
        for d in sorted(dirs):
            if os.path.isdir(d):
                observer.schedule(Handler(), d, recursive=True)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def stop(self) -> None:
        """Stop watching."""
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None


def _relevant(path: str, watched: Sequence[str]) -> bool:
    """True when an event on `path` can change the policy set (a watched file, or a policy file)."""
    if path in watched:
        return True
    return path.endswith(POLICY_SUFFIXES) and any(path.startswith(w.rstrip(os.sep) + os.sep) for w in watched)


class ConfigMapSource:
    """Policies carried by ConfigMaps: every data key ending `.policy`, `.yaml` or `.yml`."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = sorted(set(names))  # "namespace/name"
        self._data: dict[str, dict[str, str] | None] = {n: None for n in self.names}
        self._lock = threading.Lock()

    def describe(self) -> str:
        """The ConfigMap names."""
        return ", ".join(f"configmap {n}" for n in self.names)

    def wants(self, namespace: str, name: str) -> bool:
        """True when the ConfigMap `namespace/name` is one of this source's."""
        return f"{namespace}/{name}" in self._data

    def update(self, namespace: str, name: str, data: Mapping[str, str] | None) -> bool:
        """Record a ConfigMap's data (None: deleted); True when it is one of ours and changed."""
        key = f"{namespace}/{name}"
        with self._lock:
            if key not in self._data:
                return False
            new = dict(data) if data is not None else None
            if self._data[key] == new:
                return False
            self._data[key] = new
            return True

    def read(self) -> dict[str, str]:
        """Policy texts by `configmap://ns/name/key`; a missing ConfigMap is an error."""
        texts: dict[str, str] = {}
        missing: list[str] = []
        with self._lock:
            for key, data in self._data.items():
                if data is None:
                    missing.append(key)
                    continue
                for k, text in sorted(data.items()):
                    if k.endswith(POLICY_SUFFIXES):
                        texts[f"{CONFIGMAP_SCHEME}{key}/{k}"] = text
        if missing:
            raise PolicyError([unplaced("not found", source=f"configmap {m}") for m in missing])
        return texts


@dataclass(frozen=True)
class ReloadOutcome:
    """What one reload did."""

    ok: bool
    generation: int
    content_hash: str
    changed: bool
    diagnostics: tuple[Diagnostic, ...] = ()

    @property
    def error_text(self) -> str:
        """The diagnostics rendered as lint does."""
        return "\n".join(d.format() for d in self.diagnostics)

    @property
    def first_error(self) -> str:
        """The first error as `file:line:col: error: message` (one line), or "" when there is none."""
        errors = [d for d in self.diagnostics if d.severity == "error"] or list(self.diagnostics)
        return errors[0].format().splitlines()[0] if errors else ""

    def config_maps(self) -> list[str]:
        """The ConfigMaps (`namespace/name`) whose policy texts the diagnostics point into."""
        names: list[str] = []
        for d in self.diagnostics:
            if d.span.file.startswith(CONFIGMAP_SCHEME):
                ns, name = d.span.file[len(CONFIGMAP_SCHEME) :].split("/")[:2]
                if f"{ns}/{name}" not in names:
                    names.append(f"{ns}/{name}")
        return names


@dataclass
class ReloadStatus:
    """The last reload result, for `/readyz?verbose` and logs."""

    generation: int = 0
    content_hash: str = ""
    last_ok: bool = True
    last_error: str = ""
    history: list[ReloadOutcome] = field(default_factory=list)


class PolicyReloader:
    """Debounced, off-thread compile of every source; swaps a good set in, keeps the old on error."""

    def __init__(
        self,
        sources: Sequence[PolicySource],
        on_swap: Callable[[CompiledPolicySet], None],
        *,
        metrics: Any = None,
        debounce: float = 0.2,
        allow_profile_removal: bool = False,
        on_error: Callable[[ReloadOutcome], None] | None = None,
        compile_fn: Callable[[Mapping[str, str], int], CompiledPolicySet] | None = None,
    ) -> None:
        self.sources = list(sources)
        self.on_swap = on_swap
        self.on_error = on_error
        self.metrics = metrics
        self.debounce = debounce
        self.allow_profile_removal = allow_profile_removal
        self.compile_fn = compile_fn or (lambda texts, gen: compile_sources(texts, generation=gen))
        self.status = ReloadStatus()
        self.current: CompiledPolicySet | None = None
        self._lock = threading.Lock()  # serialises reloads
        self._wake = threading.Condition()
        self._pending = False
        self._quiet = debounce  # the debounce of the pending requests
        self._stop = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ reloading

    def load_initial(self) -> CompiledPolicySet:
        """Load the first set; raises PolicyError when it does not compile (nothing to fall back on)."""
        outcome = self.reload_now()
        if not outcome.ok or self.current is None:
            raise PolicyError(list(outcome.diagnostics) or [unplaced("no policy loaded")])
        return self.current

    def reload_now(self) -> ReloadOutcome:
        """Read every source and compile; swap the new set in when it is good."""
        with self._lock:
            generation = self.status.generation + 1
            try:
                texts: dict[str, str] = {}
                for source in self.sources:
                    texts.update(source.read())
                digest = content_hash(texts)
                if self.current is not None and digest == self.status.content_hash:
                    return ReloadOutcome(True, self.status.generation, digest, changed=False)
                if not texts:
                    raise PolicyError(unplaced("no policy files in " + self._describe()))
                new = self.compile_fn(texts, generation)
                self._check_profiles(new)
            except PolicyError as e:
                return self._failed(generation, e.diagnostics)
            except PolicydError as e:
                return self._failed(generation, [unplaced(str(e))])
            self.current = new
            self.status.generation = generation
            self.status.content_hash = digest
            self.status.last_ok = True
            self.status.last_error = ""
            outcome = ReloadOutcome(True, generation, digest, changed=True)
            self._record(outcome)
            lifecycle.policy_set_loaded(new, self._describe())
            self.on_swap(new)
            return outcome

    def _check_profiles(self, new: CompiledPolicySet) -> None:
        """Removing every policy of a profile is an error unless explicitly allowed."""
        if self.current is None or self.allow_profile_removal:
            return
        gone = sorted(set(self.current.profiles) - set(new.profiles))
        if gone:
            raise PolicyError(
                unplaced(
                    f"the new policy set has no policy for profile(s) {', '.join(gone)}; "
                    "that would leave them with no filters (set allowProfileRemoval to permit it)"
                )
            )

    def _failed(self, generation: int, diagnostics: Sequence[Diagnostic]) -> ReloadOutcome:
        outcome = ReloadOutcome(False, generation, "", changed=False, diagnostics=tuple(diagnostics))
        self.status.last_ok = False
        self.status.last_error = outcome.error_text
        self._record(outcome)
        lifecycle.policy_set_rejected(self.status.generation, len(outcome.diagnostics), outcome.error_text)
        if self.on_error is not None:
            self.on_error(outcome)
        return outcome

    def _record(self, outcome: ReloadOutcome) -> None:
        self.status.history = (self.status.history + [outcome])[-20:]
        if self.metrics is not None:
            self.metrics.observe_reload(outcome.ok, outcome.generation if outcome.ok else None)

    def _describe(self) -> str:
        return "; ".join(s.describe() for s in self.sources)

    # ------------------------------------------------------------------ background worker

    def request(self, why: str = "", debounce: float | None = None) -> None:
        """Ask for a reload soon, after `debounce` seconds of quiet (default: the reloader's); any thread.

        File saves come as bursts of events (write, truncate, rename) and want the full debounce; a
        ConfigMap update is one atomic event and can ask for a shorter one.
        """
        log.debug("policy reload requested why=%s", why)
        with self._wake:
            wait = self.debounce if debounce is None else min(debounce, self.debounce)
            self._quiet = wait if not self._pending else max(self._quiet, wait)
            self._pending = True
            self._wake.notify()

    def start(self) -> None:
        """Start the worker thread and the file watches."""
        for source in self.sources:
            if isinstance(source, FileSource):
                source.watch(self.request)
        self._thread = threading.Thread(target=self._run, name="policy-reload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching and the worker thread."""
        for source in self.sources:
            if isinstance(source, FileSource):
                source.stop()
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._stop:
                    self._wake.wait()
                if self._stop:
                    return
                # debounce: wait until no new request arrived for `debounce` seconds
                while self._pending and not self._stop:
                    self._pending = False
                    self._wake.wait(self._quiet)
                if self._stop:
                    return
            try:
                self.reload_now()
            except Exception:  # never let the worker die: the old set keeps scheduling
                log.exception("unexpected error during policy reload")

    def readiness(self) -> tuple[bool, str]:
        """(ok, detail) for `/readyz?verbose`: a failed last reload is reported, not fatal."""
        if self.current is None:
            return False, "no policy set loaded"
        if not self.status.last_ok:
            first = self.status.last_error.splitlines()[0] if self.status.last_error else "error"
            return True, f"generation {self.status.generation} in force; last reload failed: {first}"
        return True, f"generation {self.status.generation} ({self.status.content_hash[:12]})"
