"""The ``taskhub`` command line: thin typer commands over the public API."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from taskhub._cli import envs, results, tasksets
from taskhub._cli import leaderboard as leaderboard_cli
from taskhub._cli import rewards as rewards_cli
from taskhub._cli.eval import eval_command
from taskhub._cli.rescore import rescore_command
from taskhub._cli.validate import validate_command
from taskhub._errors import TaskhubError
from taskhub._urls import redact_urls_in
from taskhub._version import __version__

app = typer.Typer(
    name="taskhub",
    help=(
        "Evaluate and validate OpenEnv environments.\n\n"
        "Quick start:  taskhub eval scripted/oracle arith arith --limit 20\n\n"
        "MODEL is provider/model (openai/NAME, local/smollm2-135m, scripted/oracle); ENV a URL, "
        "a Space id, an env folder or a built-in env; TASKSET a built-in name, a folder, a "
        ".jsonl/.parquet file or a Hub dataset org/name[@revision]."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("eval")(eval_command)
app.command("validate")(validate_command)
app.add_typer(results.app, name="results")
app.add_typer(envs.app, name="env")
app.add_typer(tasksets.app, name="taskset")
app.add_typer(leaderboard_cli.app, name="leaderboard")
app.command("rescore")(rescore_command)
app.add_typer(rewards_cli.app, name="rewards")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"taskhub {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    log_level: Annotated[
        str,
        typer.Option(
            "--log-level",
            help="Python log level for taskhub's messages on stderr (DEBUG shows payloads).",
            envvar="TASKHUB_LOG_LEVEL",
        ),
    ] = "WARNING",
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Evaluate and validate OpenEnv environments."""
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise typer.BadParameter(f"unknown log level {log_level!r}", param_hint="--log-level")
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _UrlRedactor) for f in handler.filters):
            handler.addFilter(_UrlRedactor())
    logging.getLogger("taskhub").setLevel(level)


class _UrlRedactor(logging.Filter):
    """Takes credentials out of every URL a log line holds (httpx logs each request's URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_urls_in(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def fail(exc: TaskhubError) -> typer.Exit:
    """Print ``TypeName: message`` to stderr and return the exit to raise (code 1)."""
    typer.echo(f"{type(exc).__name__}: {exc}", err=True)
    return typer.Exit(code=1)


def main() -> None:
    """Entry point of the ``taskhub`` script."""
    try:
        app()
    except TaskhubError as exc:  # commands convert their own; this catches the rest
        typer.echo(f"{type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
