"""``taskhub results``: read run directories, publish them to the Hub."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from taskhub._cli._render import (
    change_table,
    comparison_table,
    component_table,
    group_table,
    summary_table,
    task_table,
)
from taskhub._cli.merge import merge_command
from taskhub._comparability import comparability
from taskhub._errors import TaskhubError
from taskhub._results import (
    SUMMARY_COLUMNS,
    read_manifest,
    summarize,
    summarize_groups,
    summarize_rows,
    summary_json,
)
from taskhub._results_table import read_results_table_dropped

app = typer.Typer(help="Read run directories and publish them.", no_args_is_help=True)
app.command("merge")(merge_command)


@app.command("show")
def show(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (holds run.json).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    tasks: Annotated[
        int, typer.Option(help="Rows of the per-task table to print (0: none).", min=0)
    ] = 20,
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            help="Break the numbers down by a task field, with per-group intervals: "
            "metadata.family, reset.difficulty, or a bare key looked up under metadata then "
            "reset (repeatable).",
        ),
    ] = None,
) -> None:
    """Print a run's summary: mean reward and 95% CI, components, success rate, pass@k, outcomes.

    --by FIELD adds a breakdown by a task field, with per-group intervals.
    """
    from taskhub._cli import fail

    fields = list(dict.fromkeys(by or []))
    try:
        manifest = read_manifest(run_dir)
        # columns, not records: a run of a million episodes fits in memory this way (task
        # fields for --by are read from the records block by block, the rest of them skipped)
        table, duplicates, retried = read_results_table_dropped(
            run_dir, columns=SUMMARY_COLUMNS, task_fields=fields
        )
    except TaskhubError as exc:
        raise fail(exc) from None
    config = comparability(manifest)
    groups = {field: summarize_groups(table, field, comparability=config) for field in fields}
    if as_json:
        # the per-task rows are written as they are, without a TaskSummary each
        summary, task_rows = summarize_rows(
            table, n_planned=manifest.n_planned, comparability=config
        )
        head = json.dumps(
            {
                "run_dir": str(run_dir),
                "run_id": manifest.run_id,
                "status": manifest.status,
                "model": manifest.model.spec,
                "taskset": manifest.taskset.model_dump(mode="json"),
                "comparability": {
                    "fingerprint": config.fingerprint,
                    **config.model_dump(mode="json"),
                },
                "groups": {
                    field: [g.model_dump(mode="json") for g in rows]
                    for field, rows in groups.items()
                },
                "dropped_duplicates": duplicates,
                "retried": retried,
                "summary": None,
            },
            indent=2,
        )
        # pydantic's own encoder: a summary of many tasks is written in a fraction of the time
        body = summary_json(summary, task_rows).replace("\n", "\n  ")
        typer.echo(head.removesuffix("null\n}") + body + "\n}")
        return
    summary = summarize(table, n_planned=manifest.n_planned, comparability=config)
    if duplicates:
        typer.echo(
            f"note: dropped {duplicates} duplicate record(s): some episodes were recorded "
            "twice (two writers at once?); each counts once",
            err=True,
        )
    console = Console()
    console.print(summary_table(summary, manifest, run_dir))
    if summary.components:
        console.print(component_table(summary))
    for field, rows in groups.items():
        console.print(group_table(field, rows))
    if tasks:
        console.print(task_table(summary, tasks))


@app.command("push")
def push(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (holds run.json).")],
    repo: Annotated[
        str | None, typer.Argument(help="Hub results dataset repo ORG/NAME.", show_default=False)
    ] = None,
    model_repo: Annotated[
        str | None,
        typer.Option(
            help="Also write the run's result into this model repo's .eval_results/ (the Hub's "
            "format, shown on the model page and the benchmark's leaderboard).",
        ),
    ] = None,
    metric: Annotated[
        str, typer.Option(help="The result's metric: mean_reward, success_rate or pass@1.")
    ] = "mean_reward",
    branch: Annotated[
        str | None, typer.Option(help="Branch of the model repo to commit to (default main).")
    ] = None,
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
    """Publish a run to a results repo (runs/<run_id>/), secrets redacted, others kept.

    With --model-repo, also write its result as .eval_results/<taskset>.yaml of a model repo,
    linking back to the run in the results repo.
    """
    from taskhub._cli import fail
    from taskhub.hub import is_secret_name, push_eval_results, push_results, results_url

    if repo is None and model_repo is None:
        raise typer.BadParameter("give a results REPO, --model-repo, or both", param_hint="REPO")
    source = None
    try:
        if repo is not None:
            names = {name for name in os.environ if is_secret_name(name)} | set(secret_env or [])
            secrets = {name: os.environ[name] for name in sorted(names) if os.environ.get(name)}
            result = push_results(run_dir, repo, token=token, secrets=secrets, private=private)
            typer.echo(f"pushed {run_dir} to {result.repo_id}: commit {result.commit_sha}")
            source = results_url(result.repo_id, result.commit_sha, read_manifest(run_dir).run_id)
        if model_repo is not None:
            pushed = push_eval_results(
                run_dir, model_repo, metric=metric, source_url=source, branch=branch, token=token
            )
            typer.echo(
                f"wrote {pushed.files[0]} to {pushed.repo_id} ({pushed.branch}): "
                f"commit {pushed.commit_sha}"
            )
    except TaskhubError as exc:
        raise fail(exc) from None


@app.command("compare")
def compare(
    run_a: Annotated[Path, typer.Argument(help="The baseline run directory (A).")],
    run_b: Annotated[Path, typer.Argument(help="The run compared with it (B).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    tasks: Annotated[
        int, typer.Option(help="Regressed and fixed tasks to list (0: none).", min=0)
    ] = 20,
) -> None:
    """Compare run B with run A on the tasks both ran: fixed, regressed, paired differences.

    Both runs must be on the same taskset commit and split, scored the same way. The paired
    difference of mean reward (and of success rate) averages per-task differences, with a t
    interval over tasks; McNemar's exact test pairs episodes by task and sample.
    """
    from taskhub._cli import fail
    from taskhub._compare import compare_runs

    try:
        # run directories, read as columns: no record of either is held
        comparison = compare_runs(run_a, run_b)
    except TaskhubError as exc:
        raise fail(exc) from None
    if as_json:
        typer.echo(comparison.model_dump_json(indent=2))
        return
    console = Console()
    console.print(comparison_table(comparison))
    if tasks:
        console.print(change_table(comparison, tasks))
