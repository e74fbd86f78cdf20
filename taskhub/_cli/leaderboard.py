"""``taskhub leaderboard``: build a static leaderboard site, or serve one for a quick look.

Thin commands over ``taskhub.leaderboard``, imported inside the command bodies: the core never
imports its sibling packages at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from taskhub._errors import TaskhubError

app = typer.Typer(
    help="Build a static HTML leaderboard from runs and validation reports.",
    no_args_is_help=True,
)


@app.command("build")
def build(
    inputs: Annotated[
        # strings, not paths: a source may be a Hub results repo
        list[str],
        typer.Argument(
            help="Run directories, results files (*.jsonl beside their run.json), validation "
            "reports (*.json), folders holding any of them (searched recursively), or Hub "
            "results datasets org/name[@revision] (as `taskhub results push` writes them).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Site folder to write (replaced if it holds a site built before).",
        ),
    ] = Path("site"),
    title: Annotated[str, typer.Option(help="Site title.")] = "taskhub leaderboard",
    timestamp: Annotated[
        str | None,
        typer.Option(
            help="Build time to show (none by default, so that the same inputs give the same "
            "bytes)."
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            help="Hub token for private results repos.", envvar="HF_TOKEN", show_default=False
        ),
    ] = None,
    validate: Annotated[
        bool,
        typer.Option(
            "--validate",
            help="Validate every episode record in full (slow for large runs; by default only "
            "the fields the leaderboard reads are checked).",
        ),
    ] = False,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Break every (model, taskset) cell down by a task field, with per-group "
            "intervals: metadata.family, reset.difficulty, or a key under metadata or reset.",
        ),
    ] = None,
) -> None:
    """Build the site: models x tasksets, taskset, model and run pages, episodes, env board."""
    from taskhub._cli import fail
    from taskhub.leaderboard import build_site, hub_resolver

    try:
        info = build_site(
            inputs,
            out,
            title=title,
            timestamp=timestamp,
            validate=validate,
            resolvers=[hub_resolver(token=token)],
            group_by=by,
        )
    except TaskhubError as exc:
        raise fail(exc) from None
    typer.echo(
        f"wrote {info.pages} pages for {info.runs} runs ({info.episodes} episodes) and "
        f"{info.reports} validation reports to {info.path}/ (open {info.path / 'index.html'})"
    )


@app.command("serve")
def serve(
    site: Annotated[Path, typer.Argument(help="A site folder built by `leaderboard build`.")],
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 8000,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
) -> None:
    """Serve a built site over HTTP for a quick local look (Ctrl-C stops it)."""
    from taskhub._cli import fail
    from taskhub.leaderboard import make_server

    try:
        server = make_server(site, host=host, port=port)
    except TaskhubError as exc:
        raise fail(exc) from None
    bound_host, bound_port = server.server_address[:2]
    typer.echo(f"serving {site} at http://{bound_host!s}:{bound_port}/ (Ctrl-C stops)", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
