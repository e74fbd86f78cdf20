"""``taskhub rewards list``: the rewards a spec can name, built-in and from plugins."""

from __future__ import annotations

import importlib.util
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Reward plugins.", no_args_is_help=True)


def _describe(entry: Any) -> dict[str, Any]:
    doc = (entry.factory.__doc__ or "").strip().splitlines()
    module = getattr(entry.factory, "__module__", "") or ""
    declared = entry.attrs.get("range")
    return {
        "name": entry.name,
        "arg": entry.spec_arg,
        "description": doc[0] if doc else "",
        "range": list(declared) if declared is not None else None,
        "stateful": bool(entry.attrs.get("stateful", False)),
        "module": module,
    }


@app.command("list")
def list_rewards(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List every reward name usable in --reward, with what it takes and measures."""
    from taskhub._registry import registry

    rows = [_describe(entry) for entry in registry.entries("reward")]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(box=None, pad_edge=False)
    for column in ("spec", "description", "re-score"):
        table.add_column(column)
    for row in rows:
        spec = row["name"] + (f"[:{row['arg'].upper()}]" if row["arg"] else "")
        table.add_row(spec, row["description"], "no (live env)" if row["stateful"] else "yes")
    Console().print(table)
    if importlib.util.find_spec("math_verify") is None:
        typer.echo("(math_verify, chrf... need extras: pip install 'taskhub-openenv[rewards]')")
