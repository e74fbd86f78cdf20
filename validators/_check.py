"""The check contract: one ``check_*`` coroutine per property, registered as a validator plugin.

A check reads and probes the ``Subject`` and returns a ``Finding``; it never asserts and never
decides how much its failure weighs (the severity policy does). A minimal third-party check::

    from taskhub.validators import Finding, Subject, check, failed, passed

    @check("acme/has_readme", level="static", order=19, needs=("folder",))
    async def check_has_readme(subject: Subject) -> Finding:
        if (subject.root / "README.md").is_file():
            return passed("README.md is present")
        return failed("no README.md", "Add a README.md saying what the env measures.")

``needs`` names what must be available (``folder``, ``server``, ``episode``, ``ws``,
``taskset``, ``process``, ``model``) and ``after`` the checks that must have passed first; when
either is missing the aggregator reports the check as skipped, naming why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from taskhub import CheckLevel, CheckStatus, registry, validator

if TYPE_CHECKING:
    from ._subject import Subject

#: A JSON object (measured values, frames).
JsonObject = dict[str, Any]
#: What a check may need.
NEEDS = ("folder", "server", "episode", "ws", "taskset", "process", "model")


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


def skipped(reason: str, *, measured: JsonObject | None = None) -> Finding:
    """A check that does not apply, or was not asked for."""
    return Finding("skip", reason, measured or {})


CheckFn = Callable[["Subject"], Awaitable[Finding]]


@dataclass(frozen=True)
class CheckSpec:
    """A registered check: its id, level, place in the run, and prerequisites."""

    id: str
    level: CheckLevel
    order: int
    fn: CheckFn
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    @property
    def description(self) -> str:
        """First line of the check's docstring."""
        doc = (self.fn.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""


def check(
    check_id: str,
    *,
    level: CheckLevel,
    order: int,
    needs: Iterable[str] = (),
    after: Iterable[str] = (),
) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the check ``check_id`` (a ``taskhub.validators`` plugin).

    Args:
        check_id: Stable id, RFC 008's where one exists (``runtime.seed_control``).
        level: ``static``, ``protocol``, ``runtime``, ``taskset``, ``semantic``, ``statistical``.
        order: Position in the run (checks run in increasing order).
        needs: What must be available (see ``NEEDS``).
        after: Checks that must have passed before this one runs.
    """
    needs = tuple(needs)
    unknown = sorted(set(needs) - set(NEEDS))
    if unknown or level not in get_args(CheckLevel):
        raise ValueError(f"check {check_id!r}: unknown needs {unknown} or level {level!r}")

    def decorate(fn: CheckFn) -> CheckFn:
        def factory() -> CheckFn:
            return fn

        factory.__doc__ = fn.__doc__
        validator(check_id, level=level, order=order, needs=needs, after=tuple(after))(factory)
        return fn

    return decorate


def registered_checks() -> list[CheckSpec]:
    """Every registered check (entry points included), in run order."""
    specs = []
    for entry in registry.entries("validator"):
        attrs = entry.attrs
        if "level" not in attrs or "order" not in attrs:
            continue  # a validator plugin of another shape
        specs.append(
            CheckSpec(
                id=entry.name,
                level=attrs["level"],
                order=int(attrs["order"]),
                fn=entry.factory(),
                needs=tuple(attrs.get("needs", ())),
                after=tuple(attrs.get("after", ())),
            )
        )
    return sorted(specs, key=lambda s: (s.order, s.id))
