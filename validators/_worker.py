"""One submission of a batch, in its own process: ``python -m taskhub.validators._worker JOB``.

The worker clones a git submission, or copies a folder submission into its work folder (the
submission itself is never written to), and validates it; when the batch isolates venvs, it
installs the submission's requirements after the static checks, so that an install that
fails or runs out of time still leaves them in the report. It writes what it is doing to the
job's phase file, so that a batch that has to kill it at the deadline can say what ran out.
The batch kills this process (and its process group) at the submission's deadline, so every
finished check is appended to the job's partial file as soon as it is known.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from taskhub import CheckResult, ErrorInfo, TaskhubError, ValidationReport
from taskhub.env import LocalServer

from ._batch import error_report, target_kind, write_report
from ._config import ValidationConfig
from ._sources import clone, copy_submission, parse_git, remove_tree
from ._validate import validate_async
from ._venv import DEFAULT_INSTALL_TIMEOUT_S, prepare_venv


async def run_job(job: dict[str, Any]) -> ValidationReport:
    """Validate the job's target in a copy (in an isolated venv when asked); return the report.

    Raises:
        TaskhubError: The clone, the copy or the install failed (the submission's error).
    """
    config = ValidationConfig.model_validate(job["config"])
    key = os.environ.get("TASKHUB_VALIDATE_API_KEY")
    if key:
        config = config.model_copy(update={"api_key": SecretStr(key)})
    partial = Path(job["partial"])
    workdir = Path(job["workdir"])
    remove_tree(workdir)
    workdir.mkdir(parents=True)
    target = str(job["target"])
    phase_file = Path(job["phase"])

    def phase(name: str) -> None:
        phase_file.write_text(name, encoding="utf-8")

    def record_pid(pid: int) -> None:
        # the batch kills these process groups if it has to kill this worker
        with Path(job["pids"]).open("a", encoding="utf-8") as handle:
            handle.write(f"{pid}\n")

    def on_launch(server: LocalServer) -> None:
        record_pid(server.process.pid)

    def on_check(result: CheckResult) -> None:
        with partial.open("a", encoding="utf-8") as handle:
            handle.write(result.model_dump_json() + "\n")

    shown: dict[str, Any] = {}
    try:
        git = parse_git(target)
        if git is not None:
            phase("clone")
            folder, sha = await clone(git, workdir / "src")
            target = str(folder)
            sub = f"#subdirectory={git.subdirectory}" if git.subdirectory else ""
            shown = {"target": f"{git.url}@{sha}{sub}", "target_kind": "git"}
        elif Path(target).is_dir():
            phase("copy")
            copy = copy_submission(Path(target), workdir / "src")
            target = str(copy)
            shown = {"target": str(job["target"])}
        prepare = None
        if job.get("isolated_venv") and Path(target).is_dir():
            folder = Path(target)

            async def prepare() -> str:
                # after the static checks: an install that fails still leaves them standing
                phase("install")
                sys.stderr.flush()
                python = await prepare_venv(
                    folder,
                    workdir,
                    offline=bool(job.get("offline")),
                    timeout=float(job.get("install_timeout_s") or DEFAULT_INSTALL_TIMEOUT_S),
                    cache_dir=Path(job["pip_cache"]) if job.get("pip_cache") else None,
                    log=sys.stderr.buffer,
                    on_start=record_pid,
                )
                phase("validate")
                return str(python)

        phase("validate")
        report = await validate_async(
            target,
            config,
            on_check=on_check,
            on_launch=on_launch,
            log_dir=Path(job["log_dir"]),
            prepare=prepare,
        )
        return report.model_copy(update=shown) if shown else report
    finally:
        remove_tree(workdir)


def main() -> None:
    """Entry point: read the job file, write the report, exit 0."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    job = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    started_at = datetime.now(UTC)
    try:
        report = asyncio.run(run_job(job))
    except TaskhubError as exc:  # a failed clone, copy, install or taskset: this submission's
        config = ValidationConfig.model_validate(job["config"])
        target = str(job["target"])
        report = error_report(
            target=target,
            name=config.name or target,
            config=config,
            started_at=started_at,
            duration=(datetime.now(UTC) - started_at).total_seconds(),
            error=ErrorInfo.from_exception(exc),
            kind=target_kind(target),
        )
    write_report(Path(job["report"]), report)


if __name__ == "__main__":
    main()
