"""``taskhub taskset``: list and check tasksets."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sized
from typing import Annotated

import typer

from taskhub._errors import TaskhubError
from taskhub._taskset import builtin_tasksets, load_taskset

app = typer.Typer(
    help="Tasksets: Hub datasets whose rows parameterize reset().", no_args_is_help=True
)


def _counts(splits: Mapping[str, Sized]) -> dict[str, int]:
    return {split: len(tasks) for split, tasks in splits.items()}


@app.command("list")
def list_tasksets(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the built-in tasksets."""
    tasksets = [load_taskset(name) for name in builtin_tasksets()]
    if as_json:
        rows = [{"name": t.name, "env": t.card.env, "splits": _counts(t.splits)} for t in tasksets]
        typer.echo(json.dumps(rows, indent=2))
        return
    for t in tasksets:
        splits = ", ".join(f"{k}={v}" for k, v in _counts(t.splits).items())
        typer.echo(f"{t.name:<12} env={t.card.env or '-':<12} {splits}")


@app.command("check")
def check(
    source: Annotated[
        str, typer.Argument(help="Folder, data file, built-in name or org/name@rev.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Validate every row and the card of a taskset; exit 1 naming the rows at fault."""
    from taskhub._cli import fail

    try:
        taskset = load_taskset(source)
    except TaskhubError as exc:
        raise fail(exc) from None
    counts = _counts(taskset.splits)
    if as_json:
        info = {
            "name": taskset.name,
            "env": taskset.card.env,
            "splits": counts,
            "fingerprint": taskset.ref.fingerprint,
            "commit_sha": taskset.ref.commit_sha,
        }
        typer.echo(json.dumps(info, indent=2))
    else:
        rows = ", ".join(f"{split} {count} rows" for split, count in counts.items())
        typer.echo(f"ok: {taskset.name}: {rows}")
