"""``taskhub taskset``: list, check, scaffold, publish, describe and profile tasksets."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sized
from pathlib import Path
from typing import Annotated

import typer

from taskhub._errors import TaskhubError
from taskhub._schema import Task, TasksetCard
from taskhub._taskset import builtin_tasksets, load_taskset

_TOKEN_HELP = "Hub token with write access (default: HF_TOKEN or the stored `hf auth login`)."
_REVISION_HELP = "Branch, tag or commit of a Hub taskset to read (overrides ORG/NAME@REV)."
_BRANCH_HELP = "Branch to commit to (created from main if missing; default main)."
_SPACE_HELP = (
    "Hub Space serving the env: declares the dataset as a Hub RL environment "
    "(environment.yaml, card tags rl-environment and openenv). Default: --env when it is a "
    "Space id."
)
_IMAGE_HELP = "Container image of the env, declared (mode: container) instead of a Space."

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
    revision: Annotated[str | None, typer.Option(help=_REVISION_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Validate every row and the card of a taskset; exit 1 naming the rows at fault."""
    from taskhub._cli import fail
    from taskhub.hub import check_taskset

    try:
        taskset = load_taskset(source, revision=revision)
        remote = check_taskset(taskset)
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
            "remote_code": [str(item) for item in remote],
        }
        typer.echo(json.dumps(info, indent=2))
    else:
        rows = ", ".join(f"{split} {count} rows" for split, count in counts.items())
        typer.echo(f"ok: {taskset.name}: {rows}")
        _print_remote_code([str(item) for item in remote])


def _print_remote_code(items: list[str]) -> None:
    if not items:
        return
    typer.echo(f"runs code ({len(items)}; evaluating it needs --trust-remote-code):")
    for item in items:
        typer.echo(f"  {item}")


@app.command("init")
def init(
    source: Annotated[
        str,
        typer.Argument(
            help="A .jsonl/.json/.csv/.parquet file of rows, or a Python generator "
            "MODULE:FUNCTION or FILE.py:FUNCTION returning rows (or a dict of split -> rows). "
            "With --from-env, only FOLDER is given."
        ),
    ],
    folder: Annotated[
        Path | None, typer.Argument(help="The taskset folder to create.", show_default=False)
    ] = None,
    env: Annotated[
        str | None,
        typer.Option(
            help="Environment the tasks run on: built-in name, URL, Space id "
            "(default with --from-env: that URL)."
        ),
    ] = None,
    from_env: Annotated[
        str | None,
        typer.Option(
            "--from-env",
            help="URL of a running env: its own tasks (OpenEnv Task API), every split, as rows "
            "that reset by split and index.",
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="Split name of the rows (a data file).")] = "train",
    name: Annotated[str | None, typer.Option(help="Taskset name (default: folder name).")] = None,
    description: Annotated[str | None, typer.Option(help="One paragraph for the card.")] = None,
    system_prompt: Annotated[
        str | None, typer.Option(help="System message template (jinja2).")
    ] = None,
    prompt_template: Annotated[
        str | None, typer.Option(help="First user message template (jinja2).")
    ] = None,
    reward: Annotated[
        list[str] | None, typer.Option("--reward", help="Reward spec (repeatable); default env.")
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Step limit of an episode.", min=1)] = None,
    space: Annotated[str | None, typer.Option(help=_SPACE_HELP)] = None,
    image: Annotated[str | None, typer.Option(help=_IMAGE_HELP)] = None,
    force: Annotated[bool, typer.Option(help="Write into a non-empty folder.")] = False,
) -> None:
    """Scaffold a taskset folder (card with configs and env binding, data files)."""
    from taskhub._cli import fail
    from taskhub.hub import init_taskset

    rows_source: str | Callable[[], dict[str, list[Task]]] = source
    if from_env is not None:
        if folder is not None:
            raise typer.BadParameter(
                f"with --from-env give only the folder, not {source!r} and {str(folder)!r}"
            )
        folder, env = Path(source), env or from_env
    if folder is None:
        raise typer.BadParameter("FOLDER is missing: taskhub taskset init SOURCE FOLDER --env ENV")
    if env is None:
        raise typer.BadParameter("--env is missing: the environment the tasks run on")
    try:
        if from_env is not None:
            from taskhub.env import env_tasks

            env_name, served = env_tasks(from_env)
            name = name or env_name
            description = description or f"The tasks the {env_name} env serves at {from_env}."

            def task_api() -> dict[str, list[Task]]:
                return served

            task_api.__name__ = f"the Task API of {from_env}"
            rows_source = task_api
        card = TasksetCard(
            name=name,
            description=description,
            system_prompt=system_prompt,
            prompt_template=prompt_template,
            rewards=reward or ["env"],
            max_steps=max_steps,
        )
        taskset = init_taskset(
            rows_source,
            folder,
            env=env,
            split=split,
            card=card,
            force=force,
            space=space,
            image=image,
        )
    except TaskhubError as exc:
        raise fail(exc) from None
    rows = ", ".join(f"{s} {n} rows" for s, n in _counts(taskset.splits).items())
    typer.echo(f"created {folder}: {taskset.name} ({rows}), env={env}")
    if taskset.environment is None:
        typer.echo(
            f"not declared as a Hub RL environment: env {env!r} is not a Space; pass --space "
            "OWNER/NAME (or --image REF) to declare where it runs"
        )


@app.command("push")
def push(
    path: Annotated[Path, typer.Argument(help="A taskset folder (see `taskhub taskset init`).")],
    repo: Annotated[str, typer.Argument(help="Hub dataset repo ORG/NAME (created if missing).")],
    branch: Annotated[str | None, typer.Option(help=_BRANCH_HELP)] = None,
    tag: Annotated[str | None, typer.Option(help="Tag to create at the new commit.")] = None,
    private: Annotated[bool, typer.Option(help="Create the repo private.")] = False,
    space: Annotated[str | None, typer.Option(help=_SPACE_HELP)] = None,
    image: Annotated[str | None, typer.Option(help=_IMAGE_HELP)] = None,
    token: Annotated[str | None, typer.Option(help=_TOKEN_HELP, envvar="HF_TOKEN")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Validate a taskset folder and publish it as one commit of a Hub dataset repo."""
    from taskhub._cli import fail
    from taskhub.hub import push_taskset

    try:
        result = push_taskset(
            path,
            repo,
            branch=branch,
            tag=tag,
            token=token,
            private=private,
            space=space,
            image=image,
        )
    except TaskhubError as exc:
        raise fail(exc) from None
    if as_json:
        info = {
            "repo_id": result.repo_id,
            "commit_sha": result.commit_sha,
            "branch": result.branch,
            "tag": result.tag,
            "files": list(result.files),
        }
        typer.echo(json.dumps(info, indent=2))
        return
    pinned = f"{result.repo_id}@{result.commit_sha}"
    typer.echo(f"pushed {path} to {result.repo_id} ({result.branch}): commit {result.commit_sha}")
    if result.tag:
        typer.echo(f"tagged {result.tag}")
    typer.echo(f"load it pinned: taskhub eval MODEL auto {pinned}")


@app.command("show")
def show(
    source: Annotated[
        str, typer.Argument(help="ORG/NAME[@REVISION], a folder, a data file or a built-in name.")
    ],
    revision: Annotated[str | None, typer.Option(help=_REVISION_HELP)] = None,
    token: Annotated[
        str | None, typer.Option(help="Hub token for private repos.", envvar="HF_TOKEN")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Describe a taskset: env, resolved commit, splits, row counts, columns."""
    from taskhub._cli import fail
    from taskhub.hub import describe_taskset

    try:
        info = describe_taskset(source, revision=revision, token=token)
    except TaskhubError as exc:
        raise fail(exc) from None
    if as_json:
        typer.echo(info.model_dump_json(indent=2))
        return
    typer.echo(f"taskset   {info.name} ({info.kind})")
    if info.repo_id:
        typer.echo(f"repo      {info.repo_id}@{info.revision or 'main'}")
        typer.echo(f"commit    {info.commit_sha}")
    typer.echo(f"env       {info.env or '-'}")
    typer.echo(f"rewards   {', '.join(info.rewards)}")
    typer.echo(f"default   {info.default_split}")
    for split, detail in info.splits.items():
        profiled = f", {detail.profiled} profiled" if detail.profiled else ""
        typer.echo(f"split     {split}: {detail.rows} rows{profiled}")
        typer.echo(f"  columns   {', '.join(detail.columns)}")
        if detail.metadata_keys:
            typer.echo(f"  metadata  {', '.join(detail.metadata_keys)}")
    _print_remote_code(info.remote_code)


@app.command("profile")
def profile(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories on one taskset.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the profiled taskset here.")
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(help="Push to this repo (default: the runs' Hub taskset, if no --output)."),
    ] = None,
    branch: Annotated[str | None, typer.Option(help=_BRANCH_HELP)] = None,
    tag: Annotated[str | None, typer.Option(help="Tag to create at the new commit.")] = None,
    token: Annotated[str | None, typer.Option(help=_TOKEN_HELP, envvar="HF_TOKEN")] = None,
) -> None:
    """Write per-task pass rates and difficulty from runs into a new taskset revision."""
    from taskhub._cli import fail
    from taskhub.hub import profile_taskset

    try:
        result = profile_taskset(
            run_dirs, output=output, repo_id=repo, branch=branch, tag=tag, token=token
        )
    except TaskhubError as exc:
        raise fail(exc) from None
    typer.echo(
        f"profiled {len(result.profiles)} tasks from {len(run_dirs)} run(s) "
        f"({', '.join(result.models)})"
    )
    if output is not None:
        typer.echo(f"wrote {result.folder}")
    if result.push is not None:
        typer.echo(
            f"pushed to {result.push.repo_id} ({result.push.branch}): "
            f"commit {result.push.commit_sha}"
        )
