"""Batch validation on Ray: one Ray task per submission, under its deadline; the driver writes.

Each submission is validated by a Ray task on whichever node has a free CPU, with the batch
worker's own code (``run_job``) in a node-local work folder. The task streams every finished
check back as it is known, then the report; the driver (the process running the batch) writes
``<name>.json``. A task still running at the submission's deadline is cancelled with its worker
process (its env server dies with it) and the submission gets an ``error`` report holding the
checks it finished; a task whose worker dies gets one too. Nothing a submission does can hang
the batch.
"""

from __future__ import annotations

import asyncio
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskhub import CheckResult, ErrorInfo, TaskhubError, ValidationReport

from ._config import ValidationConfig

if TYPE_CHECKING:
    from ._batch import Submission, _Batch


def validate_on_node(job: dict[str, Any], api_key: str | None) -> Iterator[tuple[str, str]]:
    """Run one submission's validation here; yield ``("check", json)``s, then the report.

    The body of the Ray task: the job's paths are made in a fresh folder of this node.
    """
    from ._batch import error_report, target_kind
    from ._worker import run_job

    work = Path(tempfile.mkdtemp(prefix="taskhub-validate-"))
    job = {
        **job,
        "partial": str(work / "partial.jsonl"),
        "pids": str(work / "pids"),
        "phase": str(work / "phase"),
        "report": str(work / "report.json"),
        "log_dir": str(work / "logs"),
        "workdir": str(work / "work"),
        # one pip cache per node, shared by the submissions validated there
        "pip_cache": str(Path(tempfile.gettempdir()) / "taskhub-pip-cache"),
    }
    if api_key:
        os.environ["TASKHUB_VALIDATE_API_KEY"] = api_key
    results: queue.Queue[tuple[str, str]] = queue.Queue()

    def body() -> None:
        # The env servers are launched from this thread's event loop: they are told to die
        # with it, and with this process when a cancelled task's worker is killed.
        started_at = datetime.now(UTC)
        try:
            report = asyncio.run(run_job(job))
            results.put(("report", report.model_dump_json()))
        except TaskhubError as exc:  # a failed clone, copy or install: the submission's error
            config = ValidationConfig.model_validate(job["config"])
            target = str(job["target"])
            report = error_report(
                target=target,
                name=config.name or target,
                config=config,
                started_at=started_at,
                duration=(datetime.now(UTC) - started_at).total_seconds(),
                error=ErrorInfo.from_exception(exc),
                checks=[CheckResult.model_validate_json(line) for line in finished_lines()],
                kind=target_kind(target),
            )
            results.put(("report", report.model_dump_json()))
        except BaseException as exc:
            info = ErrorInfo.from_exception(exc)
            results.put(("error", info.model_dump_json()))

    partial, sent = Path(job["partial"]), 0

    def finished_lines() -> list[str]:
        if not partial.is_file():
            return []
        return partial.read_text(encoding="utf-8").split("\n")[:-1]

    thread = threading.Thread(target=body, daemon=True)
    thread.start()

    def finished_checks() -> list[str]:
        # on_check appends whole lines: the text after the last line break is still coming
        nonlocal sent
        lines = finished_lines()
        new, sent = lines[sent:], len(lines)
        return new

    try:
        while True:
            try:
                kind, payload = results.get(timeout=0.5)
            except queue.Empty:
                kind, payload = "", ""
            for line in finished_checks():
                yield ("check", line)
            if kind:
                yield (kind, payload)
                return
    finally:
        os.environ.pop("TASKHUB_VALIDATE_API_KEY", None)
        shutil.rmtree(work, ignore_errors=True)


async def run_one_on_ray(batch: _Batch, submission: Submission, remote: Any) -> None:
    """Validate one submission with a Ray task; write its report (the driver is the writer)."""
    import ray

    from ._batch import error_report, read_report, write_report

    report_path = batch.output / f"{submission.file_stem}.json"
    if read_report(report_path) is not None:
        if batch.progress:
            batch.progress(submission, read_report(report_path), "resumed")
        return
    remaining = batch.remaining()
    if remaining is not None and remaining <= 0:
        return  # left for a resumed run
    deadline = submission.deadline_s or batch.config.deadline_s
    if remaining is not None:
        deadline = min(deadline, remaining)
    validation = batch.config.validation.model_copy(
        update={
            "name": submission.name,
            "taskset": submission.taskset or batch.config.validation.taskset,
            "budget_s": min(batch.config.validation.budget_s, deadline),
        }
    )
    job = {
        "target": submission.target,
        "config": validation.model_dump(mode="json"),
        "isolated_venv": batch.config.isolated_venv,
        "offline": batch.config.offline,
        "install_timeout_s": min(batch.config.install_timeout_s, deadline),
    }
    key = batch.config.validation.api_key
    started_at, started = datetime.now(UTC), time.perf_counter()
    checks: list[CheckResult] = []
    report: ValidationReport | None = None
    error: ErrorInfo | None = None
    stream = remote.remote(job, key.get_secret_value() if key else None)
    try:
        async with asyncio.timeout(deadline):
            async for ref in stream:
                kind, payload = await ref
                if kind == "check":
                    checks.append(CheckResult.model_validate_json(payload))
                elif kind == "report":
                    report = ValidationReport.model_validate_json(payload)
                else:
                    info = ErrorInfo.model_validate_json(payload)
                    error = ErrorInfo(
                        type="WorkerCrashed",
                        boundary="batch",
                        message=f"the validation failed inside its Ray task: {info.type}: "
                        f"{info.message}",
                    )
    except TimeoutError:
        ray.cancel(stream, force=True)
        error = ErrorInfo(
            type="DeadlineExceeded",
            boundary="batch",
            message=f"the submission was still validating after its {deadline:g}s deadline "
            "and its Ray task was stopped; the checks it finished are kept",
        )
    except ray.exceptions.RayError as exc:
        error = ErrorInfo(
            type="WorkerCrashed",
            boundary="batch",
            message=f"the Ray task validating the submission died ({type(exc).__name__}): "
            + str(exc)[-1500:],
        )
    if report is None:
        report = error_report(
            target=submission.target,
            name=submission.name,
            config=validation,
            started_at=started_at,
            duration=time.perf_counter() - started,
            error=error
            or ErrorInfo(type="WorkerCrashed", boundary="batch", message="no report came back"),
            checks=checks,
        )
    write_report(report_path, report)
    batch.finished(submission, report_path)


def ray_task(ray: Any) -> Any:
    """The Ray task that validates one submission (one CPU, never retried: it has a deadline)."""
    return ray.remote(num_cpus=1, max_retries=0)(validate_on_node)
