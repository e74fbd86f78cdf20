"""``taskhub rescore RUN_DIR --reward SPEC``: new rewards over a stored run, no episode re-run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from taskhub._cli._render import BarProgress, summary_table, task_table
from taskhub._errors import TaskhubError
from taskhub._rescore import DEFAULT_CONCURRENCY, rescore


def rescore_command(
    run_dir: Annotated[Path, typer.Argument(help="The run directory to re-score (only read).")],
    reward: Annotated[
        list[str],
        typer.Option(
            "--reward",
            help="Reward spec NAME[:ARG][=WEIGHT|=gate], repeatable. Stateful rewards (env) "
            "need the live env and are refused.",
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Folder for the new run directory (default: beside RUN_DIR)."
        ),
    ] = None,
    new_run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Exact new run directory to create.")
    ] = None,
    success_threshold: Annotated[
        float | None,
        typer.Option(help="Reward at which an episode succeeds (default: the source run's)."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", help="Episodes scored at once.", min=1)
    ] = DEFAULT_CONCURRENCY,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    progress: Annotated[
        bool | None,
        typer.Option("--progress/--no-progress", help="Live progress bar (default: on a TTY)."),
    ] = None,
    show_tasks: Annotated[
        int, typer.Option(help="Rows of the per-task table to print (0: none).", min=0)
    ] = 0,
) -> None:
    """Score the stored trajectories of RUN_DIR with new rewards; write a new run directory.

    No episode runs again; the new run's run.json names RUN_DIR's run as parent_run.
    Infra errors are copied as they are; every other episode gets new components and total.

    Examples:
      taskhub rescore runs/my-run --reward math_verify --reward answer_present=gate

      taskhub rescore runs/my-run --reward judge:openai/gpt-4o-mini --run-dir runs/judged
    """
    import sys

    from taskhub._cli import fail

    console = Console(stderr=True)
    show_bar = progress if progress is not None else console.is_terminal and not as_json
    try:
        result = rescore(
            run_dir,
            reward,
            output_dir=output,
            run_dir=new_run_dir,
            success_threshold=success_threshold,
            concurrency=concurrency,
            progress=BarProgress(console) if show_bar else None,
            argv=list(sys.argv),
        )
    except KeyboardInterrupt:
        typer.echo("interrupted: the new run directory holds the episodes scored so far", err=True)
        raise typer.Exit(code=130) from None
    except TaskhubError as exc:
        raise fail(exc) from None
    if as_json:
        payload = {
            "run_dir": str(result.run_dir),
            "run_id": result.manifest.run_id,
            "parent_run": result.manifest.parent_run,
            "status": result.manifest.status,
            "summary": result.summary.model_dump(mode="json"),
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    out = Console()
    out.print(summary_table(result.summary, result.manifest, result.run_dir))
    out.print(f"re-scored from run {result.manifest.parent_run} ({run_dir})")
    if show_tasks:
        out.print(task_table(result.summary, show_tasks))
