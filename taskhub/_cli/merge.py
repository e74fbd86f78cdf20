"""``taskhub results merge RUN... --output DIR``: the shards of one evaluation made one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from taskhub._cli._render import summary_table
from taskhub._errors import TaskhubError
from taskhub._merge import merge_runs


def merge_command(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Run directories of the shards (each holds run.json).")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The merged run directory to create.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Merge shard runs (--shard i/n run apart) into one run directory.

    The runs must be parts of one evaluation: same taskset commit, model and sampling, reward
    specs, env, seed and episode settings; a mix is refused, naming the difference. One record
    per (task, sample) is kept. Episodes no shard wrote are run by `taskhub eval --resume DIR`.
    """
    import os
    import sys

    from taskhub._cli import fail

    try:
        result = merge_runs(
            run_dirs, output, argv=list(sys.argv), hub_token=os.environ.get("HF_TOKEN")
        )
    except TaskhubError as exc:
        raise fail(exc) from None
    if as_json:
        payload = {
            "run_dir": str(result.run_dir),
            "run_id": result.manifest.run_id,
            "status": result.manifest.status,
            "merged_from": result.manifest.merged_from,
            "duplicates": result.duplicates,
            "summary": result.summary.model_dump(mode="json"),
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    console = Console()
    console.print(summary_table(result.summary, result.manifest, result.run_dir))
    if result.duplicates:
        console.print(f"{result.duplicates} duplicate records left out (one kept per episode)")
    if result.manifest.status != "completed":
        missing = result.manifest.n_planned - result.summary.n_episodes
        console.print(
            f"{missing} planned episodes have no record: "
            f"taskhub eval --resume {result.run_dir} runs them"
        )
