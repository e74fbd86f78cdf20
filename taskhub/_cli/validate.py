"""``taskhub validate``: check one env, or a whole batch of submissions, against RFC 008.

Exit codes of one validation: 0 pass or warn, 1 fail, 2 not a recognizable env (or bad
usage), 3 internal error. Of a batch: 0 every submission has a report, 1 some were left for a
resumed run (time budget), 2 bad usage, 3 internal error, 128 + the signal's number when a
signal stopped it (130 Ctrl-C, 143 SIGTERM).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import SecretStr, ValidationError

from taskhub._errors import TaskhubError

if TYPE_CHECKING:
    from taskhub.validators import ValidationConfig, ValidationReport

USAGE_EXIT = 2
INTERNAL_EXIT = 3


def validate_command(
    target: Annotated[
        str | None,
        typer.Argument(
            help="An env folder, a built-in env, the URL of a running server, or a git source "
            "git+URL@COMMIT[#subdirectory=PATH]. Omit with --batch.",
            show_default=False,
        ),
    ] = None,
    taskset: Annotated[
        str | None,
        typer.Option(
            help="Taskset driving the taskset and semantic checks (rows with reset "
            "kwargs, answers, oracle_actions). Default: a built-in env's own, or the "
            "env folder's taskset/."
        ),
    ] = None,
    split: Annotated[str | None, typer.Option(help="Taskset split.")] = None,
    tasks: Annotated[int, typer.Option(help="Rows sampled for the checks.", min=1, max=50)] = 6,
    model: Annotated[
        str | None,
        typer.Option(
            help="Model for the statistical checks (provider/model); without it they are skipped."
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="OpenAI-compatible endpoint of --model.", envvar="OPENAI_BASE_URL"),
    ] = None,
    samples: Annotated[
        int, typer.Option(help="Samples per task in the statistical checks (GRPO group G).", min=2)
    ] = 4,
    stat_tasks: Annotated[int, typer.Option(help="Tasks in the statistical run.", min=1)] = 20,
    temperature: Annotated[
        float, typer.Option(help="Sampling temperature of the statistical run.", min=0)
    ] = 1.0,
    policy: Annotated[
        str,
        typer.Option(
            help="Severity policy: a shipped name-version (taskhub-v2: RFC 008's policy v2; "
            "taskhub-v1) or a .json file."
        ),
    ] = "taskhub-v2",
    check: Annotated[
        list[str] | None,
        typer.Option("--check", help="Run only this check id (repeatable); prerequisites run too."),
    ] = None,
    budget: Annotated[
        float, typer.Option(help="Time budget of one validation, seconds.", min=1)
    ] = 600.0,
    check_timeout: Annotated[float, typer.Option(help="Deadline of one check.", min=1)] = 90.0,
    op_timeout: Annotated[
        float, typer.Option(help="Deadline of one request to the env.", min=0.1)
    ] = 10.0,
    startup_timeout: Annotated[
        float, typer.Option(help="Seconds a launched env gets to become healthy.", min=1)
    ] = 60.0,
    sessions: Annotated[
        int,
        typer.Option(help="Concurrent sessions asked of a launched env and probed.", min=1, max=64),
    ] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    output: Annotated[
        Path | None, typer.Option(help="Also write the JSON report to this file.")
    ] = None,
    rfc008: Annotated[
        Path | None,
        typer.Option(
            "--rfc008",
            help="Also write the report in RFC 008's own layout (OpenEnv's report version 2) "
            "to this file; with --batch, one per submission into this folder.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show measured values.")] = False,
    batch: Annotated[
        Path | None,
        typer.Option(
            help="Validate every submission of a .jsonl/.csv file (name + target, "
            "folder, url or git with commit) instead of TARGET."
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option(help="Batch output folder: <name>.json reports, summary.json, summary.csv."),
    ] = Path("validation"),
    workers: Annotated[int, typer.Option(help="Batch: submissions at once.", min=1)] = 2,
    deadline: Annotated[
        float, typer.Option(help="Batch: deadline of one submission, seconds.", min=1)
    ] = 900.0,
    batch_budget: Annotated[
        float | None, typer.Option(help="Batch: time budget of the whole batch, seconds.")
    ] = None,
    isolated_venv: Annotated[
        bool,
        typer.Option(
            help="Batch: install each submission's requirements in its own virtual environment."
        ),
    ] = False,
    offline: Annotated[
        bool, typer.Option(help="With --isolated-venv: install from local paths only.")
    ] = False,
    install_timeout: Annotated[
        float,
        typer.Option(
            help="With --isolated-venv: time limit of one submission's install, seconds.", min=1
        ),
    ] = 600.0,
    pip_cache: Annotated[
        Path | None,
        typer.Option(
            help="With --isolated-venv: pip's cache, shared by every install "
            "(default: OUT/.pip-cache)."
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Batch: one Ray task per submission on a Ray cluster ('local', 'auto', "
            "HOST:PORT), each under its deadline; the reports are written here.",
            envvar="TASKHUB_RAY",
        ),
    ] = None,
) -> None:
    """Validate an OpenEnv environment (or a batch of submissions) and print its report card.

    Static checks read the folder; the env is then launched (or reached at its URL) for the
    protocol, runtime, taskset and semantic checks; with --model a model plays the taskset
    for the statistical ones. Exit 0 pass/warn, 1 fail, 2 not an env, 3 internal error.
    """
    from taskhub.validators import (
        BatchConfig,
        BatchInterrupted,
        ValidationConfig,
        read_submissions,
        render_report,
        rfc008_report,
        validate_batch,
    )

    api_key = os.environ.get("OPENAI_API_KEY")
    try:
        config = ValidationConfig(
            taskset=taskset,
            split=split,
            tasks=tasks,
            model=model,
            base_url=base_url,
            api_key=SecretStr(api_key) if api_key else None,
            samples=samples,
            stat_tasks=stat_tasks,
            temperature=temperature,
            policy=policy,
            checks=check,
            budget_s=budget,
            check_timeout_s=check_timeout,
            op_timeout_s=op_timeout,
            startup_timeout_s=startup_timeout,
            sessions=sessions,
        )
    except ValidationError as exc:
        typer.echo(f"bad option: {exc}", err=True)
        raise typer.Exit(USAGE_EXIT) from None
    if batch is not None:
        if target is not None:
            typer.echo("give either TARGET or --batch, not both", err=True)
            raise typer.Exit(USAGE_EXIT)
        try:
            submissions = read_submissions(batch)
            batch_config = BatchConfig(
                output=out,
                workers=workers,
                deadline_s=deadline,
                budget_s=batch_budget,
                isolated_venv=isolated_venv,
                offline=offline,
                install_timeout_s=install_timeout,
                pip_cache=pip_cache,
                rfc008=rfc008 is not None,
                validation=config,
                ray=ray,
            )
        except (TaskhubError, ValidationError) as exc:
            typer.echo(f"{type(exc).__name__}: {exc}", err=True)
            raise typer.Exit(USAGE_EXIT) from None
        total = len(submissions)
        done = [0]

        def progress(submission: object, report: object, how: str) -> None:
            done[0] += 1
            verdict = getattr(report, "verdict", "no report")
            duration = getattr(report, "duration_s", 0.0)
            typer.echo(
                f"[{done[0]}/{total}] {getattr(submission, 'name', '?')}: "
                f"{str(verdict).upper()} ({how}, {duration:.1f}s)",
                err=True,
            )

        try:
            rows = validate_batch(submissions, batch_config, progress=progress)
        except (KeyboardInterrupt, BatchInterrupted) as exc:
            signum = getattr(exc, "signum", 2)
            typer.echo(
                f"interrupted ({exc or 'SIGINT'}): every worker and env server was stopped; "
                f"finished reports are in {out}; run again to resume",
                err=True,
            )
            raise typer.Exit(128 + signum) from None
        except TaskhubError as exc:
            typer.echo(f"{type(exc).__name__}: {exc}", err=True)
            raise typer.Exit(USAGE_EXIT) from None
        if rfc008 is not None and rfc008.resolve() != (out / "rfc008").resolve():
            rfc008.mkdir(parents=True, exist_ok=True)
            for path in sorted((out / "rfc008").glob("*.json")):
                (rfc008 / path.name).write_text(path.read_text(encoding="utf-8"), "utf-8")
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
        else:
            typer.echo(
                f"{'rank':>4}  {'verdict':<11} {'score':>5}  {'reached':<8} name / failed checks"
            )
            for row in rows:
                failed = ", ".join(row["failed_checks"][:6])
                more = len(row["failed_checks"]) - 6
                typer.echo(
                    f"{row['rank']:>4}  {row['verdict']:<11} {row['score']:>5.1f}  "
                    f"{row['reached']:<8} {row['name']}"
                    + (f"  [{failed}{f' +{more}' if more > 0 else ''}]" if failed else "")
                )
            typer.echo(f"reports and summary.json/summary.csv in {out}")
        raise typer.Exit(0 if len(rows) == total else 1)
    if target is None:
        typer.echo(
            "give an env TARGET (folder, built-in env, URL, git source) or --batch FILE", err=True
        )
        raise typer.Exit(USAGE_EXIT)
    signals: list[int] = []
    try:
        report = asyncio.run(_validate_until_stopped(target, config, signals))
    except TaskhubError as exc:
        typer.echo(f"{type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(USAGE_EXIT) from None
    except Exception as exc:  # the validator itself failed: exit 3, as RFC 008 says
        typer.echo(f"internal error: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(INTERNAL_EXIT) from None
    text = report.model_dump_json(indent=2)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text + "\n", encoding="utf-8")
    if rfc008 is not None:
        rfc008.parent.mkdir(parents=True, exist_ok=True)
        rfc008.write_text(json.dumps(rfc008_report(report), indent=2) + "\n", encoding="utf-8")
    if as_json:
        sys.stdout.write(text + "\n")
    else:
        typer.echo(render_report(report, verbose=verbose))
    if signals:
        name = signal.Signals(signals[0]).name
        typer.echo(f"stopped by {name}: the report holds the checks that finished", err=True)
        raise typer.Exit(128 + signals[0])
    raise typer.Exit(report.exit_code)


async def _validate_until_stopped(
    target: str, config: ValidationConfig, signals: list[int]
) -> ValidationReport:
    """Validate; Ctrl-C or SIGTERM stops the checks, and the report keeps what finished.

    The signals met are appended to ``signals``.
    """
    from taskhub.validators import validate_async

    task = asyncio.current_task()
    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        if not signals and task is not None:
            task.cancel()
        signals.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await validate_async(target, config)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
