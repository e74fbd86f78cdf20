"""The check contract: one ``check_*`` coroutine per property, registered as a validator plugin.

A check reads and probes the ``Subject`` and returns a ``Finding``; it never asserts and never
decides how much its failure weighs (the severity policy does). A minimal third-party check::

    from taskhub.validators import Finding, Subject, check, failed, passed

    @check("acme/has_readme", level="static", needs=("folder",))
    async def check_has_readme(subject: Subject) -> Finding:
        if (subject.root / "README.md").is_file():
            return passed("README.md is present")
        return failed("no README.md", "Add a README.md saying what the env measures.")

A check declares what it needs instead of relying on the order checks run in:

- ``needs`` names what must be available (see ``NEEDS``). ``server``, ``ws`` and ``episode``
  are established by the checks that declare them in ``provides`` (``runtime.startup``,
  ``protocol.websocket``, ``protocol.episode``): those run first, and ``--check ID`` pulls
  them in. ``exchanges`` means the check reads every exchange the other checks played: it runs
  after all of them.
- ``after`` names checks that must have *passed* first (they are pulled in too).
- ``uses`` names checks whose findings explain this one's (the wire a ``protocol.episode``
  failure depends on): they run first and are pulled in, whatever their outcome.
- ``disrupts`` marks a check that may crash or restart the server: it runs after every check
  that does not.

When a need is missing or an ``after`` check did not pass, the aggregator reports the check as
skipped, naming why. Data several checks read (the do-nothing floor, the oracle episodes) are
``Product``s of the subject, computed once on first use.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, get_args

from taskhub import CheckLevel, CheckStatus, ConfigError, registry, validator

from ._json import JsonObject
from ._subject import Subject

#: What a check may need.
NEEDS = ("folder", "server", "ws", "episode", "exchanges", "taskset", "process", "model")
#: What a check may establish for the others (a subset of ``NEEDS``).
PROVIDABLE = ("server", "ws", "episode")
#: Levels in report order; within the constraints, checks run in this order too.
LEVEL_RANK: dict[str, int] = {level: rank for rank, level in enumerate(get_args(CheckLevel))}
_SEQUENCE = itertools.count()


@dataclass
class Finding:
    """What a check found: its status, a one-sentence summary, numbers, proof and advice."""

    status: CheckStatus
    summary: str
    measured: JsonObject = field(default_factory=dict)
    evidence: list[Any] = field(default_factory=list)
    remediation: str | None = None


def passed(
    summary: str, *, measured: JsonObject | None = None, evidence: list[Any] | None = None
) -> Finding:
    """A passing finding."""
    return Finding("pass", summary, measured or {}, evidence or [])


def failed(
    summary: str,
    remediation: str,
    *,
    measured: JsonObject | None = None,
    evidence: list[Any] | None = None,
) -> Finding:
    """A failing finding, with what the env author should do."""
    return Finding("fail", summary, measured or {}, evidence or [], remediation)


def skipped(
    reason: str, *, measured: JsonObject | None = None, remediation: str | None = None
) -> Finding:
    """A check that does not apply, or was not asked for (with what would enable it)."""
    return Finding("skip", reason, measured or {}, [], remediation)


CheckFn = Callable[[Subject], Awaitable[Finding]]


@dataclass(frozen=True)
class CheckSpec:
    """A registered check: its id, level, and what it needs and provides."""

    id: str
    level: CheckLevel
    fn: CheckFn
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    disrupts: bool = False
    order: int = 0
    """Tie-break among checks of one level with the same standing (registration order)."""

    @property
    def description(self) -> str:
        """First line of the check's docstring."""
        doc = (self.fn.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""


def check(
    check_id: str,
    *,
    level: CheckLevel,
    needs: Iterable[str] = (),
    after: Iterable[str] = (),
    uses: Iterable[str] = (),
    provides: Iterable[str] = (),
    disrupts: bool = False,
    order: int | None = None,
) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the check ``check_id`` (a ``taskhub.validators`` plugin).

    Args:
        check_id: Stable id, RFC 008's where one exists (``runtime.seed_control``); a
            built-in id starts with its level (``runtime.``).
        level: ``static``, ``protocol``, ``runtime``, ``taskset``, ``semantic``, ``statistical``.
        needs: What must be available (see ``NEEDS``).
        after: Checks that must have passed before this one runs.
        uses: Checks that run first, whatever their outcome (their findings explain this one's).
        provides: What this check establishes for the others (see ``PROVIDABLE``).
        disrupts: The check may crash or restart the server: it runs after the others.
        order: Tie-break within the level (registration order when None).
    """
    needs, provides = tuple(needs), tuple(provides)
    unknown = sorted((set(needs) - set(NEEDS)) | (set(provides) - set(PROVIDABLE)))
    if unknown or level not in get_args(CheckLevel):
        raise ValueError(f"check {check_id!r}: unknown needs {unknown} or level {level!r}")
    sequence = next(_SEQUENCE) if order is None else order

    def decorate(fn: CheckFn) -> CheckFn:
        def factory() -> CheckFn:
            return fn

        factory.__doc__ = fn.__doc__
        validator(
            check_id,
            level=level,
            needs=needs,
            after=tuple(after),
            uses=tuple(uses),
            provides=provides,
            disrupts=disrupts,
            order=sequence,
        )(factory)
        return fn

    return decorate


def registered_checks() -> list[CheckSpec]:
    """Every registered check (entry points included), in run order (see ``schedule``)."""
    specs = []
    for entry in registry.entries("validator"):
        attrs = entry.attrs
        if "level" not in attrs:
            continue  # a validator plugin of another shape
        specs.append(
            CheckSpec(
                id=entry.name,
                level=attrs["level"],
                fn=entry.factory(),
                needs=tuple(attrs.get("needs", ())),
                after=tuple(attrs.get("after", ())),
                uses=tuple(attrs.get("uses", ())),
                provides=tuple(attrs.get("provides", ())),
                disrupts=bool(attrs.get("disrupts", False)),
                order=int(attrs.get("order") or 0),
            )
        )
    return schedule(specs)


def _plays(spec: CheckSpec) -> bool:
    """Whether the check plays episodes the run-wide checks must see."""
    return "episode" in spec.needs and "exchanges" not in spec.needs and not spec.disrupts


def schedule(specs: list[CheckSpec]) -> list[CheckSpec]:
    """Order checks so that each runs after what it depends on.

    A check runs after its ``after`` and ``uses`` checks, after the checks that provide what
    it needs, after every episode-playing check when it needs ``exchanges``, and after every
    non-disrupting check when it ``disrupts``. Among the checks that are ready, the lowest
    level runs first, then the first registered.

    Raises:
        ConfigError: The declarations form a cycle.
    """
    by_id = {s.id: s for s in specs}
    providers: dict[str, list[str]] = {}
    for spec in specs:
        for need in spec.provides:
            providers.setdefault(need, []).append(spec.id)
    before: dict[str, set[str]] = {s.id: set() for s in specs}
    for spec in specs:
        deps = before[spec.id]
        deps.update(d for d in spec.after + spec.uses if d in by_id)
        for need in spec.needs:
            deps.update(p for p in providers.get(need, ()) if p != spec.id)
        if "exchanges" in spec.needs:
            deps.update(s.id for s in specs if _plays(s))
        if spec.disrupts:
            deps.update(s.id for s in specs if not s.disrupts)
        deps.discard(spec.id)
    ordered: list[CheckSpec] = []
    done: set[str] = set()
    while len(ordered) < len(specs):
        ready = [s for s in specs if s.id not in done and before[s.id] <= done]
        if not ready:
            stuck = sorted(s.id for s in specs if s.id not in done)
            raise ConfigError(f"the checks {stuck} depend on each other in a cycle")
        first = min(ready, key=lambda s: (LEVEL_RANK[s.level], s.order, s.id))
        ordered.append(first)
        done.add(first.id)
    return ordered


def prerequisites(specs: list[CheckSpec], wanted: Iterable[str]) -> set[str]:
    """``wanted`` and, transitively, the checks they declare they need or must follow."""
    by_id = {s.id: s for s in specs}
    providers: dict[str, list[str]] = {}
    for spec in specs:
        for need in spec.provides:
            providers.setdefault(need, []).append(spec.id)
    keep = set(wanted)
    pending = list(keep)
    while pending:
        found = by_id.get(pending.pop())
        if found is None:
            continue
        deps = [*found.after, *found.uses, *(p for n in found.needs for p in providers.get(n, ()))]
        for dep in deps:
            if dep not in keep:
                keep.add(dep)
                pending.append(dep)
    return keep
