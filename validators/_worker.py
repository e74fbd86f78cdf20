"""One submission of a batch, in its own process: ``python -m taskhub.validators._worker JOB``.

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

from taskhub import CheckResult, ErrorInfo, TaskhubError, ValidationReport, __version__
from taskhub.env import LocalServer

from ._batch import write_report
from ._config import ValidationConfig
from ._policy import EXIT_CODES, load_policy
from ._sources import clone, parse_git, remove_tree
from ._validate import validate_async
from ._venv import prepare_venv


async def run_job(job: dict[str, Any]) -> ValidationReport:
    """Validate the job's target (in an isolated venv when asked) and return the report."""
    config = ValidationConfig.model_validate(job["config"])
    key = os.environ.get("TASKHUB_VALIDATE_API_KEY")
    if key:
        config = config.model_copy(update={"api_key": SecretStr(key)})
    partial = Path(job["partial"])
    workdir = Path(job["workdir"])
    workdir.mkdir(parents=True, exist_ok=True)
    target = str(job["target"])

    def on_launch(server: LocalServer) -> None:
        # the batch kills these process groups if it has to kill this worker
        with Path(job["pids"]).open("a", encoding="utf-8") as handle:
            handle.write(f"{server.process.pid}\n")

    def on_check(result: CheckResult) -> None:
        with partial.open("a", encoding="utf-8") as handle:
            handle.write(result.model_dump_json() + "\n")

    shown: dict[str, Any] = {}
    try:
        if job.get("isolated_venv"):
            git = parse_git(target)
            if git is not None:
                folder, sha = await clone(git, workdir / "src")
                target = str(folder)
                sub = f"#subdirectory={git.subdirectory}" if git.subdirectory else ""
                shown = {"target": f"{git.url}@{sha}{sub}", "target_kind": "git"}
            folder = Path(target)
            if folder.is_dir():
                python = await prepare_venv(folder, workdir, offline=bool(job.get("offline")))
                config = config.model_copy(update={"python": str(python)})
        report = await validate_async(
            target, config, on_check=on_check, on_launch=on_launch, log_dir=Path(job["log_dir"])
        )
        return report.model_copy(update=shown) if shown else report
    finally:
        remove_tree(workdir)


def main() -> None:
    """Entry point: read the job file, write the report, exit 0 (3 on an internal error)."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    job = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    started_at = datetime.now(UTC)
    try:
        report = asyncio.run(run_job(job))
    except TaskhubError as exc:  # a bad taskset or venv: this submission's error
        config = ValidationConfig.model_validate(job["config"])
        policy = load_policy(config.policy)
        report = ValidationReport(
            target=str(job["target"]),
            target_kind="git" if parse_git(str(job["target"])) else "folder",
            name=config.name or str(job["target"]),
            policy={"name": policy.name, "version": policy.version},
            verdict="error",
            exit_code=EXIT_CODES["error"],
            started_at=started_at,
            duration_s=(datetime.now(UTC) - started_at).total_seconds(),
            taskhub_version=__version__,
            model=config.model,
            error=ErrorInfo.from_exception(exc),
        )
    write_report(Path(job["report"]), report)


if __name__ == "__main__":
    main()
