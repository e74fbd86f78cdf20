"""``taskhub results``: read run directories, publish them to the Hub."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from taskhub._cli._render import summary_table, task_table
from taskhub._cli.merge import merge_command
from taskhub._errors import TaskhubError
from taskhub._results import SUMMARY_COLUMNS, read_manifest, summarize
from taskhub._results_table import dropped_records, read_results_table

app = typer.Typer(help="Read run directories and publish them.", no_args_is_help=True)
app.command("merge")(merge_command)


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
        manifest = read_manifest(run_dir)
        # columns, not records: a run of a million episodes fits in memory this way
        table = read_results_table(run_dir, columns=SUMMARY_COLUMNS)
        duplicates, retried = dropped_records(run_dir)
    except TaskhubError as exc:
        raise fail(exc) from None
    summary = summarize(table, n_planned=manifest.n_planned)
    if as_json:
        head = json.dumps(
            {
                "run_dir": str(run_dir),
                "run_id": manifest.run_id,
                "status": manifest.status,
                "model": manifest.model.spec,
                "taskset": manifest.taskset.model_dump(mode="json"),
                "dropped_duplicates": duplicates,
                "retried": retried,
                "summary": None,
            },
            indent=2,
        )
        # pydantic's own encoder: a summary of many tasks is written in a fraction of the time
        body = summary.model_dump_json(indent=2).replace("\n", "\n  ")
        typer.echo(head.removesuffix("null\n}") + body + "\n}")
        return
    if duplicates:
        typer.echo(
            f"note: dropped {duplicates} duplicate record(s): some episodes were recorded "
            "twice (two writers at once?); each counts once",
            err=True,
        )
    console = Console()
    console.print(summary_table(summary, manifest, run_dir))
    if tasks:
        console.print(task_table(summary, tasks))


@app.command("push")
def push(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (holds run.json).")],
    repo: Annotated[str, typer.Argument(help="Hub results dataset repo ORG/NAME.")],
    token: Annotated[
        str | None,
        typer.Option(
            help="Hub token with write access (default: HF_TOKEN or `hf auth login`).",
            envvar="HF_TOKEN",
        ),
    ] = None,
    secret_env: Annotated[
        list[str] | None,
        typer.Option(
            "--secret-env",
            help="Also redact the value of this environment variable (repeatable). Variables "
            "whose names end in KEY, TOKEN, SECRET, PASSWORD... are always redacted.",
        ),
    ] = None,
    private: Annotated[bool, typer.Option(help="Create the repo private.")] = False,
) -> None:
    """Publish a run to a results repo (runs/<run_id>/), secrets redacted, others kept."""
    from taskhub._cli import fail
    from taskhub.hub import is_secret_name, push_results

    names = {name for name in os.environ if is_secret_name(name)} | set(secret_env or [])
    secrets = {name: os.environ[name] for name in sorted(names) if os.environ.get(name)}
    try:
        result = push_results(run_dir, repo, token=token, secrets=secrets, private=private)
    except TaskhubError as exc:
        raise fail(exc) from None
    typer.echo(f"pushed {run_dir} to {result.repo_id}: commit {result.commit_sha}")
