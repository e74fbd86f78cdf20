"""The aggregator: resolve the target, run every registered check in order, apply the policy.

Every check runs (a failure does not stop the others: maximum information per run), each
under its own deadline and all under the run's time budget, in the order their declarations
give (``_check.schedule``). A check whose prerequisites are missing is reported as skipped
with the reason; one the budget leaves no time for is an error.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from taskhub import (
    CheckResult,
    ConfigError,
    EnvError,
    EnvLaunchError,
    ErrorInfo,
    Lane,
    Task,
    TaskhubError,
    Taskset,
    ValidationReport,
    __version__,
    builtin_tasksets,
    load_taskset,
)
from taskhub.env import LocalServer, ServedApp, find_app, resolve_env

from . import _checks  # noqa: F401  (registers the checks)
from ._check import CheckSpec, Finding, failed, prerequisites, registered_checks, skipped
from ._config import ValidationConfig
from ._driver import EnvDriver
from ._json import JsonObject
from ._manifest import read_manifest
from ._policy import EXIT_CODES, Policy, load_policy
from ._protocol import METADATA, WIRE, unfinished_wire
from ._sources import clone, parse_git, remove_tree, source_digest, temp_workdir
from ._subject import EnvDescription, Subject, TargetKind

logger = logging.getLogger(__name__)

#: Protocol checks that, when all fail on a URL, mean it is not an OpenEnv server at all.
RECOGNITION = ("protocol.health", "protocol.schema", "protocol.websocket", "protocol.episode")
#: How many times a server that died during validation is started again.
MAX_RELAUNCHES = 2
#: Most a slow env's per-check deadline is stretched, as a multiple of the configured one.
MAX_SLOWDOWN = 4.0

OnCheck = Callable[[CheckResult], None]
#: Prepares the env before the first check past the static level (installs its requirements)
#: and returns the interpreter that runs it; an ``EnvLaunchError`` fails ``runtime.startup``.
Prepare = Callable[[], Awaitable[str | None]]


def _jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy: tuples become lists, non-finite floats and objects become text."""
    if depth > 40:
        return "..."
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v, depth + 1) for v in value]
    return str(value)


def sample_tasks(taskset: Taskset, split: str | None, n: int) -> list[Task]:
    """``n`` rows of the split, spread evenly from first to last."""
    rows = list(taskset.tasks(split))
    if len(rows) <= n:
        return rows
    if n == 1:
        return rows[:1]
    step = (len(rows) - 1) / (n - 1)
    return [rows[round(i * step)] for i in range(n)]


def default_taskset(kind: TargetKind, spec: str, folder: Path | None) -> str | None:
    """The taskset used when none is given: a built-in env's own, or the folder's ``taskset/``."""
    if kind == "builtin" and spec in builtin_tasksets():
        return spec
    if folder is not None and (folder / "taskset" / "README.md").is_file():
        return str(folder / "taskset")
    return None


def missing_need(subject: Subject, need: str) -> str | None:
    """Why ``need`` is not available to a check (None when it is)."""
    env, driver = subject.env, subject.driver
    reasons: dict[str, tuple[bool, str]] = {
        "folder": (env.folder is None, "the target is a URL: there are no files to read"),
        "server": (driver.url is None, "no running server (it did not start, or died)"),
        "episode": (
            driver.url is None or not subject.passed("protocol.episode"),
            "no episode could run (protocol.episode did not pass, or the server died)",
        ),
        "ws": (driver.transport != "ws", "the server has no WebSocket sessions"),
        "exchanges": (False, ""),
        "taskset": (env.taskset is None, "no taskset was given (--taskset)"),
        "process": (driver.server is None, "the server is not a local process"),
        "model": (not subject.config.model, "no model was given (--model)"),
    }
    missing, why = reasons[need]
    return why if missing else None


def _selected(specs: list[CheckSpec], wanted: list[str] | None) -> list[CheckSpec]:
    if not wanted:
        return specs
    by_id = {s.id: s for s in specs}
    unknown = sorted(set(wanted) - set(by_id))
    if unknown:
        raise ConfigError(f"unknown check id(s) {unknown}; known: {', '.join(sorted(by_id))}")
    keep = prerequisites(specs, wanted)
    return [s for s in specs if s.id in keep]


class _Run:
    """One validation in progress."""

    def __init__(
        self,
        subject: Subject,
        policy: Policy,
        on_check: OnCheck | None,
        specs: list[CheckSpec] | None = None,
    ) -> None:
        self.subject = subject
        self.policy = policy
        self.on_check = on_check
        self.results: list[CheckResult] = []
        self.blocked: set[str] = set()
        self.relaunches = 0
        self.deaths_seen: set[int] = set()
        self.deadline = time.monotonic() + subject.config.budget_s
        self.providers = {need: s.id for s in specs or () for need in s.provides}
        self.died_during: str | None = None
        self.prepare_error: EnvLaunchError | None = None
        manifest = subject.env.manifest
        self.legacy_manifest = bool(manifest and manifest.raw and manifest.validation is None)

    def _env_caused(self, need: str) -> bool:
        """Whether a missing ``need`` is the env's doing (a server that did not start...)."""
        local = need == "process" and self.subject.env.folder is not None
        return need in self.providers or local

    def _blocker(self, need: str) -> str | None:
        """The check whose failure left ``need`` missing (a skip for it counts against the env)."""
        provider = self.providers.get("server" if need == "process" else need)
        result = self.subject.results.get(provider) if provider else None
        if result is not None and result.status != "pass":
            return provider
        return self.died_during if self._env_caused(need) else None

    def _prerequisite(self, spec: CheckSpec) -> Finding | None:
        subject = self.subject
        for dep in spec.after:
            result = subject.results.get(dep)
            if result is not None and (result.status in ("fail", "error") or dep in self.blocked):
                self.blocked.add(spec.id)
                return skipped(
                    f"depends on {dep}, which did not pass", measured={"blocked_by": dep}
                )
        # a need nobody provides (a model, a taskset, files) first: its skip does not apply to
        # the env, while a missing server or episode is the env's doing and counts against it
        for need in sorted(spec.needs, key=self._env_caused):
            why = missing_need(subject, need)
            if why is not None:
                if need in ("server", "episode"):
                    self.blocked.add(spec.id)
                blocker = self._blocker(need)
                return skipped(why, measured={"blocked_by": blocker} if blocker else None)
        if self.prepare_error is not None and "server" in spec.provides:
            message = str(self.prepare_error)
            return failed(
                f"the env could not be prepared: {message.splitlines()[0] if message else ''}",
                "Make the declared requirements install in a fresh virtual environment of "
                "this Python (pin versions that ship wheels for it); pip's whole output is "
                "in the submission's log.",
                measured={"prepare_timed_out": bool(getattr(self.prepare_error, "timed_out", 0))},
                evidence=[message[-4000:]],
            )
        return None

    async def run_check(self, spec: CheckSpec) -> CheckResult:
        subject = self.subject
        started = time.perf_counter()
        finding = self._prerequisite(spec)
        if finding is None:
            finding = await self._execute(spec)
        evidence = list(finding.evidence)
        died = self._server_died()
        if died is not None:
            evidence.append({"server": died})
        result = CheckResult(
            id=spec.id,
            level=spec.level,
            status=finding.status,
            severity=self.policy.severity(spec.id, legacy_manifest=self.legacy_manifest),
            summary=finding.summary[:1000],
            measured=_jsonable(finding.measured),
            evidence=_jsonable(evidence[:20]),
            remediation=finding.remediation if finding.status != "pass" else None,
            duration_s=round(time.perf_counter() - started, 4),
        )
        subject.results[spec.id] = result
        self.results.append(result)
        logger.info("%s %s: %s", spec.id, result.status, result.summary)
        if self.on_check is not None:
            self.on_check(result)
        if died is not None:
            self.died_during = spec.id
            subject.driver.url = None
            if self.relaunches < MAX_RELAUNCHES:  # so that one crash does not fail every check
                self.relaunches += 1
                try:
                    await subject.driver.launch()
                except (EnvError, OSError) as exc:
                    logger.warning("relaunching the server failed: %s", exc)
        subject.driver.sample_rss()
        return result

    def stopped(self, specs: list[CheckSpec]) -> None:
        """Report every check that did not finish as an error: the validation was stopped."""
        running = self.subject.driver.current_check
        for spec in specs:
            if spec.id in self.subject.results:
                continue
            during = spec.id == running
            result = CheckResult(
                id=spec.id,
                level=spec.level,
                status="error",
                severity=self.policy.severity(spec.id, legacy_manifest=self.legacy_manifest),
                summary="the validation was stopped "
                + ("during this check" if during else "before this check started"),
            )
            self.subject.results[spec.id] = result
            self.results.append(result)

    def _server_died(self) -> str | None:
        server = self.subject.driver.server
        if server is None or server.process.poll() is None or id(server) in self.deaths_seen:
            return None
        self.deaths_seen.add(id(server))
        return (
            f"the server process exited with code {server.process.returncode} during this "
            f"check. Its output ends with: {server.log_tail(8)[-800:]}"
        )

    async def _discover(self) -> None:
        """Learn the server's wire (``protocol.WIRE``) under its own deadline.

        The discovery resets and steps the env several times (and waits out a slow reset):
        it is not the work of the first check that reads it, so it is not bound by that
        check's deadline.
        """
        subject = self.subject
        limit = subject.config.check_timeout_s * MAX_SLOWDOWN
        remaining = self.deadline - time.monotonic()
        subject.driver.current_check = "protocol.wire"
        try:
            async with asyncio.timeout(max(min(limit, remaining), 0.001)):
                await subject.get(WIRE)
        except TimeoutError:
            subject.products[WIRE.name] = unfinished_wire(min(limit, remaining))
        except (EnvError, OSError) as exc:  # the checks that read it report it
            logger.warning("the protocol discovery failed: %s", exc)

    def _still_answering(
        self, answered_before: int, timeouts_before: int, timeout: float
    ) -> Finding | None:
        """A skip when a check ran out of its own time while the env kept answering.

        The env answered requests during the check and none of them, nor the one in flight,
        outlasted a request's deadline: the env is slow for the check's deadline, not hung.
        """
        driver = self.subject.driver
        answered = driver.answered - answered_before
        quiet_s = time.monotonic() - driver.last_answer_at
        hung = driver.timeouts > timeouts_before or quiet_s >= driver.op_timeout_s
        if answered == 0 or hung:
            return None
        return skipped(
            f"the check did not finish within its {timeout:g}s although the env kept "
            f"answering ({answered} requests, the last {quiet_s:.1f}s before the end): the "
            "env is slower than this check's deadline, which says nothing against it",
            measured={"check_timeout_s": timeout, "answered": answered},
            remediation="Raise --check-timeout to let this check finish on a slow env.",
        )

    async def _execute(self, spec: CheckSpec) -> Finding:
        subject = self.subject
        config = subject.config
        if (
            "server" in spec.needs
            and subject.driver.url is not None
            and subject.peek(WIRE) is None
            and self.deadline > time.monotonic()
        ):
            await self._discover()
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return Finding(
                "error",
                f"the validation's time budget ({config.budget_s:g}s) ran "
                "out before this check started",
            )
        limit = config.stat_timeout_s if spec.level == "statistical" else config.check_timeout_s
        # an env measured slow (protocol.WIRE) gets proportionally longer per check
        limit *= min(subject.driver.slowdown, MAX_SLOWDOWN)
        budget_bound = remaining < limit
        timeout = min(limit, remaining)
        subject.driver.current_check = spec.id
        exchanges = subject.driver.exchanges
        first_exchange = len(exchanges)
        answered, timeouts = subject.driver.answered, subject.driver.timeouts
        try:
            async with asyncio.timeout(timeout):
                return await spec.fn(subject)
        except TimeoutError:
            tail = [e.evidence() for e in exchanges[first_exchange:][-3:]]
            if budget_bound:
                return Finding(
                    "error",
                    f"the validation's time budget ({config.budget_s:g}s) "
                    "ran out during this check",
                    evidence=tail,
                )
            still_answering = self._still_answering(answered, timeouts, timeout)
            if still_answering is not None:
                return still_answering
            return failed(
                f"the check did not finish within {timeout:g}s",
                "Answer every request promptly: the env hung or was too slow for this check.",
                evidence=tail,
            )
        except EnvError as exc:
            tail = [e.evidence() for e in exchanges[first_exchange:][-3:]]
            return failed(
                f"the env broke the check: {type(exc).__name__}: {exc}"[:600],
                "Answer every protocol request with a well-formed frame.",
                evidence=tail,
            )
        except TaskhubError as exc:
            return Finding("error", f"{type(exc).__name__}: {exc}"[:600])
        except Exception as exc:  # a bug in a check must not end the validation
            logger.exception("check %s crashed", spec.id)
            return Finding(
                "error",
                f"the check crashed: {type(exc).__name__}: {exc}"[:600],
                evidence=[traceback.format_exc()[-1500:]],
            )


async def validate_async(
    target: str,
    config: ValidationConfig | None = None,
    *,
    on_check: OnCheck | None = None,
    on_launch: Callable[[LocalServer], None] | None = None,
    log_dir: Path | None = None,
    prepare: Prepare | None = None,
) -> ValidationReport:
    """Validate an env and return its report card.

    Args:
        target: An env folder, a built-in env name, an ``http(s)://``/``ws(s)://`` URL of a
            running server, a Space id, or a git source ``git+URL@commit[#subdirectory=P]``.
        config: What to run and the deadlines (defaults when None).
        on_check: Called with each check's result as soon as it is known.
        on_launch: Called with each env server launched (before it is healthy), so that a
            supervisor can kill it if this process dies.
        log_dir: Where launched servers write their output (a temp folder when None).
        prepare: Run after the static checks, before the env is launched (a batch installs
            the submission's requirements); it returns the interpreter to launch with. Its
            ``EnvLaunchError`` is the failure of ``runtime.startup``: the static checks stand.

    Returns:
        The report: every check, and the verdict of the severity policy. Verdict
        ``unsupported`` (exit code 2) when the target is not an env: a URL that does not
        serve the OpenEnv protocol, a folder with neither an openenv.yaml nor a server.

    Raises:
        ConfigError: Unknown policy or check id.
        TasksetError: The taskset cannot be loaded.
    """
    config = config or ValidationConfig()
    policy = load_policy(config.policy)
    specs = _selected(registered_checks(), config.checks)
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    workdir: Path | None = None

    def report(**fields: Any) -> ValidationReport:
        verdict = fields.pop("verdict")
        return ValidationReport(
            target=fields.pop("target", target),
            target_kind=fields.pop("target_kind", "folder"),
            name=fields.pop("name", config.name or Path(target.rstrip("/")).name or target),
            policy={"name": policy.name, "version": policy.version},
            verdict=verdict,
            exit_code=EXIT_CODES[verdict],
            started_at=started_at,
            duration_s=round(time.perf_counter() - started, 3),
            taskhub_version=__version__,
            model=config.model,
            **fields,
        )

    kind: TargetKind
    folder: Path | None = None
    url: str | None = None
    shown = target
    git = parse_git(target)
    try:
        if git is not None:
            workdir = temp_workdir()
            folder, sha = await clone(git, workdir / "src", timeout=min(config.budget_s, 300))
            kind, shown = (
                "git",
                f"{git.url}@{sha}"
                + (f"#subdirectory={git.subdirectory}" if git.subdirectory else ""),
            )
        else:
            resolved = resolve_env(target)
            kind = "url" if resolved.kind == "space" else resolved.kind
            folder, url = resolved.path, resolved.url
    except EnvLaunchError as exc:
        if workdir is not None:
            remove_tree(workdir)
        return report(  # a clone that fails is an error, not a target that is no env
            verdict="error" if git else "unsupported",
            target_kind="git" if git else "folder",
            error=ErrorInfo(type=type(exc).__name__, message=str(exc), boundary="validate"),
        )
    served: ServedApp | None = None
    if folder is not None and not (folder / "openenv.yaml").is_file():
        # not packaged for OpenEnv: validated all the same when it serves an app somewhere
        try:
            served = find_app(folder)
        except EnvLaunchError as exc:
            if workdir is not None:
                remove_tree(workdir)
            return report(
                verdict="unsupported",
                target=shown,
                target_kind=kind,
                error=ErrorInfo(type="UnsupportedTarget", boundary="validate", message=str(exc)),
            )
    manifest = read_manifest(folder) if folder is not None and served is None else None
    digest = source_digest(folder) if folder is not None else None
    taskset_source = config.taskset or default_taskset(kind, target, folder)
    try:
        taskset = load_taskset(taskset_source) if taskset_source else None
    except BaseException:
        if workdir is not None:
            remove_tree(workdir)
        raise
    if taskset is not None:
        tasks = sample_tasks(taskset, config.split, config.tasks)
    else:
        tasks = [Task(task_id=f"seed-{s}", reset={"seed": s}) for s in (11, 22, 33)]
    name = (
        config.name
        or (manifest.name if manifest and manifest.name else None)
        or (folder.name if folder else target)
    )
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(config.op_timeout_s, connect=5.0), follow_redirects=False
    ) as http:
        description = EnvDescription(
            target=shown,
            kind=kind,
            folder=folder,
            manifest=manifest,
            taskset=taskset,
            taskset_source=taskset_source,
            tasks=tasks,
            served_app=served,
        )
        driver = EnvDriver(
            config=config,
            http=http,
            folder=folder,
            url=url,
            sessions=description.declared_sessions,
            log_dir=log_dir or (workdir / "logs" if workdir else None),
            python=config.python,
            on_launch=on_launch,
        )
        subject = Subject(env=description, driver=driver, config=config, policy=policy)
        run = _Run(subject, policy, on_check, specs)
        error: ErrorInfo | None = None
        try:
            for spec in specs:
                if prepare is not None and spec.level != "static":
                    try:
                        driver.python = await prepare() or driver.python
                    except EnvLaunchError as exc:
                        run.prepare_error = exc
                    prepare = None
                await run.run_check(spec)
            if config.checks is None:  # RFC 008's ids no check implements: skips, with why
                lane: Lane = "hub" if config.model else "local"
                run.results += policy.unimplemented([s.id for s in specs], lane)
        except asyncio.CancelledError:
            # stopped from outside (a signal, a supervisor's deadline): what finished stands,
            # and the report says which checks did not run
            current = asyncio.current_task()
            if current is None or current.uncancel() > 0:
                raise
            run.stopped(specs)
            error = ErrorInfo(
                type="Interrupted",
                boundary="validate",
                message=f"the validation was stopped after {len(subject.results)} of "
                f"{len(specs)} checks; the others are errors",
            )
        except Exception as exc:  # the aggregator itself failed: an internal error
            logger.exception("validation of %s failed", target)
            error = ErrorInfo(type=type(exc).__name__, message=str(exc), boundary="validate")
        finally:
            driver.stop()
            if workdir is not None:
                remove_tree(workdir)
    results = run.results
    if error is not None and error.type != "Interrupted":
        verdict = "error"
    elif (
        kind == "url"
        and subject.passed("runtime.startup")
        and all(
            subject.results.get(c) is not None and subject.results[c].status != "pass"
            for c in RECOGNITION
        )
    ):
        verdict = "unsupported"
        error = ErrorInfo(
            type="UnsupportedTarget",
            boundary="validate",
            message=f"{target} does not serve the OpenEnv protocol",
        )
    else:
        verdict = policy.verdict_of(results)
    return report(
        verdict=verdict,
        target=shown,
        target_kind=kind,
        name=name,
        env_metadata=_metadata_body(subject),
        taskset=taskset.ref if taskset is not None else None,
        checks=results,
        error=error,
        source_digest=digest,
    )


def _metadata_body(subject: Subject) -> JsonObject | None:
    reply = subject.peek(METADATA)
    return reply.json if reply is not None and isinstance(reply.json, dict) else None


def validate(
    target: str, config: ValidationConfig | None = None, **kwargs: Any
) -> ValidationReport:
    """Run ``validate_async`` to completion."""
    return asyncio.run(validate_async(target, config, **kwargs))
