"""``taskhub results``: read run directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from taskhub._cli._render import summary_table, task_table
from taskhub._errors import TaskhubError
from taskhub._results import read_run, summarize

app = typer.Typer(help="Read run directories.", no_args_is_help=True)


@app.command("show")
def show(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (holds run.json).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    tasks: Annotated[
        int, typer.Option(help="Rows of the per-task table to print (0: none).", min=0)
    ] = 20,
) -> None:
    """Print a run's summary: mean reward with its 95% CI, success rate, pass@k, outcomes."""
    from taskhub._cli import fail

    try:
        run = read_run(run_dir)
    except TaskhubError as exc:
        raise fail(exc) from None
    summary = summarize(run.records, n_planned=run.manifest.n_planned)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "run_dir": str(run.path),
                    "run_id": run.manifest.run_id,
                    "status": run.manifest.status,
                    "model": run.manifest.model.spec,
                    "taskset": run.manifest.taskset.model_dump(mode="json"),
                    "summary": summary.model_dump(mode="json"),
                },
                indent=2,
            )
        )
        return
    console = Console()
    console.print(summary_table(summary, run.manifest, run.path))
    if tasks:
        console.print(task_table(summary, tasks))
