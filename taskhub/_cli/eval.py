"""``taskhub eval MODEL ENV TASKSET``: run a model through a taskset's episodes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import SecretStr, ValidationError
from rich.console import Console

from taskhub._cli._render import (
    BarProgress,
    LineProgress,
    component_table,
    summary_table,
    task_table,
)
from taskhub._errors import ConfigError, PluginError, TaskhubError
from taskhub._results import MANIFEST, iter_results, read_manifest
from taskhub._runner import (
    Progress,
    RunInterrupted,
    RunResult,
    check_model,
    check_rewards,
    evaluate,
    resume,
)
from taskhub._schema import EvalConfig, SamplingParams, ToolCalling
from taskhub._urls import redact_urls_in

DEFAULT_MODEL = "local/smollm2-135m"
DEFAULT_TASKSET = "arith"
_SECRET_FLAGS = {"--api-key"}


def _parse_shard(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    index, sep, count = value.partition("/")
    if not sep or not index.isdigit() or not count.isdigit():
        raise typer.BadParameter(f"{value!r} is not i/n (e.g. 0/4)", param_hint="--shard")
    return int(index), int(count)


def _parse_options(values: list[str] | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for value in values or []:
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(
                f"{value!r} is not KEY=VALUE", param_hint="--env-provider-option"
            )
        try:
            options[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            options[key.strip()] = text
    return options


def _redacted_argv() -> list[str]:
    """The command line as ``run.json`` records it: no key, no credentials in any URL."""
    argv, hide = [], False
    for arg in map(redact_urls_in, sys.argv):
        if hide:
            argv.append("***")
            hide = False
        elif arg in _SECRET_FLAGS:
            argv.append(arg)
            hide = True
        elif any(arg.startswith(flag + "=") for flag in _SECRET_FLAGS):
            argv.append(arg.split("=", 1)[0] + "=***")
        else:
            argv.append(arg)
    return argv


def eval_command(
    model: Annotated[
        str,
        typer.Argument(
            help="provider/model: openai/NAME (needs --base-url), local/smollm2-135m (CPU, "
            "offline), scripted/oracle|random|noop.",
        ),
    ] = DEFAULT_MODEL,
    env: Annotated[
        str,
        typer.Argument(
            help="http(s):// or ws(s):// URL of a running server, a Hub Space owner/name, an "
            "OpenEnv env folder, a built-in env (arith, gridworld), or 'auto' for the taskset "
            "card's env.",
        ),
    ] = "auto",
    taskset: Annotated[
        str,
        typer.Argument(
            help="Built-in taskset (arith, gridworld), a folder in Hub layout, a .jsonl/.parquet "
            "file, or a Hub dataset org/name[@revision].",
        ),
    ] = DEFAULT_TASKSET,
    base_url: Annotated[
        str | None,
        typer.Option(
            help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1.",
            envvar="OPENAI_BASE_URL",
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            help="API key of the endpoint (prefer the environment variable).",
            envvar="OPENAI_API_KEY",
            show_default=False,
        ),
    ] = None,
    split: Annotated[str | None, typer.Option(help="Split to run (default: the card's).")] = None,
    limit: Annotated[
        int | None, typer.Option(help="Run only the first N tasks (before --shard).", min=1)
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            help="Run shard i/n (0-based) of the tasks --limit kept; `taskhub results merge` "
            "joins the shards' run directories into one run."
        ),
    ] = None,
    samples: Annotated[
        int, typer.Option("--samples", "-k", help="Episodes per task (pass@k).", min=1)
    ] = 1,
    seed: Annotated[
        int, typer.Option(help="Run seed (env seeds for rows without one, model seeds).")
    ] = 0,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", help="Episodes in flight.", min=1)
    ] = 4,
    replicas: Annotated[
        int, typer.Option(help="Server processes to launch for a local env.", min=1)
    ] = 1,
    env_provider: Annotated[
        str | None,
        typer.Option(
            help="Start the env with an OpenEnv provider: uv (ENV: folder, built-in env, Space "
            "id, git+URL; its own dependencies via uv run), docker (ENV: an image or a Space "
            "id), hf-sandbox, modal, daytona, novita, aca (ENV: the provider's image source).",
            envvar="TASKHUB_ENV_PROVIDER",
        ),
    ] = None,
    env_provider_option: Annotated[
        list[str] | None,
        typer.Option(
            "--env-provider-option",
            help="KEY=VALUE passed to the provider's constructor (VALUE read as JSON when it "
            "parses), repeatable. Never credentials: the SDKs read theirs from the environment.",
        ),
    ] = None,
    max_sessions_per_env: Annotated[
        int | None,
        typer.Option(help="Sessions per server at most (default: learnt from the server).", min=1),
    ] = None,
    fresh_session: Annotated[
        bool,
        typer.Option(
            help="Open a new env session for every episode instead of resetting an idle one."
        ),
    ] = False,
    max_steps: Annotated[
        int | None, typer.Option(help="Step limit per episode (overrides card and rows).", min=1)
    ] = None,
    reward: Annotated[
        list[str] | None,
        typer.Option(
            "--reward",
            help="Reward spec NAME[:ARG][=WEIGHT|=gate], repeatable (default: the taskset's).",
        ),
    ] = None,
    success_threshold: Annotated[
        float | None, typer.Option(help="Reward at which an episode counts as a success.")
    ] = None,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.", min=0)] = 0.0,
    top_p: Annotated[float | None, typer.Option(help="Nucleus sampling mass.")] = None,
    max_tokens: Annotated[int, typer.Option(help="Most tokens per reply.", min=1)] = 256,
    stop: Annotated[list[str] | None, typer.Option(help="Stop sequence, repeatable.")] = None,
    step_timeout: Annotated[float, typer.Option(help="Deadline of one env request, s.")] = 60.0,
    episode_timeout: Annotated[float, typer.Option(help="Deadline of one episode, s.")] = 900.0,
    model_timeout: Annotated[
        float, typer.Option(help="Deadline of one model call, retries included, s.")
    ] = 120.0,
    max_retries: Annotated[
        int, typer.Option(help="Retries of an episode after an infra error.", min=0)
    ] = 2,
    format_retries: Annotated[
        int, typer.Option(help="Times an unparseable reply is shown back to the model.", min=0)
    ] = 1,
    fail_fast: Annotated[
        bool, typer.Option(help="Stop at the first episode that is not scored.")
    ] = False,
    tool_calling: Annotated[
        ToolCalling,
        typer.Option(
            help="native: offer the env's actions as function tools (OpenAI tools); text: ask "
            "for JSON in the reply; auto: native where the backend supports it, text where "
            "the server refuses tools.",
            envvar="TASKHUB_TOOL_CALLING",
        ),
    ] = "auto",
    revision: Annotated[
        str | None, typer.Option(help="Branch, tag or commit of a Hub taskset.")
    ] = None,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Folder in which the run directory is made.",
            envvar="TASKHUB_OUTPUT",
        ),
    ] = Path("runs"),
    run_dir: Annotated[
        Path | None, typer.Option(help="Exact run directory to create (instead of --output).")
    ] = None,
    resume_dir: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Finish the interrupted run in this directory "
            "(other arguments are taken from its run.json).",
        ),
    ] = None,
    cache: Annotated[
        Path | None,
        typer.Option(
            help="Model-call cache folder: identical requests (greedy, or sampled with a seed) "
            "are answered from it, so a re-run or a resume repeats no call.",
            envvar="TASKHUB_CACHE",
        ),
    ] = None,
    trust_remote_code: Annotated[
        bool,
        typer.Option(
            "--trust-remote-code",
            help="Let the taskset's rows and card run code on this machine (python:, trl:, "
            "openenv: rewards, an env folder); refused otherwise. Read it first: taskhub "
            "taskset show TASKSET.",
        ),
    ] = False,
    retry: Annotated[
        list[str] | None,
        typer.Option(
            "--retry",
            help="With --resume: also run again the episodes that ended so ('infra': "
            "infra_error); their earlier records stay as history, never counted.",
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Play the episodes on a Ray cluster, one worker per node (each with its own "
            "env servers, model client and --concurrency): 'local' starts Ray on this machine, "
            "'auto' joins the one running here, HOST:PORT or ray://HOST:PORT a cluster. The "
            "records are those of a run without --ray. Needs taskhub-openenv[ray].",
            envvar="TASKHUB_RAY",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    progress: Annotated[
        bool | None,
        typer.Option("--progress/--no-progress", help="Live progress bar (default: on a TTY)."),
    ] = None,
    show_tasks: Annotated[
        int, typer.Option(help="Rows of the per-task table to print (0: none).", min=0)
    ] = 0,
) -> None:
    """Run MODEL through every task of TASKSET on ENV; write a run directory; print a summary.

    Examples:
      taskhub eval scripted/oracle arith arith --limit 20

      taskhub eval local/smollm2-135m auto gridworld --limit 10

      taskhub eval openai/gpt-4o-mini https://owner-env.hf.space org/tasks@v1 --base-url https://api.openai.com/v1

    Exit codes: 0 the run completed (episode failures are results, counted in the summary);
    1 an error stopped it (its message says what; the run directory stays resumable); 2 bad
    usage; 130 interrupted (resume with --resume RUN_DIR).
    """
    from taskhub._cli import fail

    console = Console(stderr=True)
    bar: Progress | None = None
    if progress is None and not console.is_terminal:
        bar = LineProgress(lambda line: typer.echo(line, err=True))
    elif progress if progress is not None else not as_json:
        bar = BarProgress(console)
    if resume_dir is not None and not retry and _finished(resume_dir):
        return
    headers: dict[str, str] = {}
    hub_token = os.environ.get("HF_TOKEN")
    if hub_token and "/" in env and not env.startswith(("http", "ws", ".", "/")):
        headers["Authorization"] = f"Bearer {hub_token}"
    executor = None
    if ray is not None:
        from taskhub._ray import RayExecutor

        executor = RayExecutor(ray)
    try:
        result: RunResult
        if resume_dir is not None:
            result = resume(
                resume_dir,
                api_key=api_key,
                base_url=base_url,
                retry=retry or (),
                progress=bar,
                env_headers=headers,
                argv=_redacted_argv(),
                executor=executor,
            )
        else:
            if retry:
                raise typer.BadParameter("--retry needs --resume RUN_DIR", param_hint="--retry")
            try:
                config = EvalConfig(
                    model=model,
                    env=None if env == "auto" else env,
                    taskset=taskset,
                    revision=revision,
                    base_url=base_url,
                    api_key=SecretStr(api_key) if api_key else None,
                    sampling=SamplingParams(
                        temperature=temperature, top_p=top_p, max_tokens=max_tokens, stop=stop
                    ),
                    split=split,
                    limit=limit,
                    shard=_parse_shard(shard),
                    samples=samples,
                    seed=seed,
                    concurrency=concurrency,
                    replicas=replicas,
                    env_provider=env_provider,
                    env_provider_options=_parse_options(env_provider_option),
                    max_sessions_per_env=max_sessions_per_env,
                    fresh_session=fresh_session,
                    max_steps=max_steps,
                    rewards=reward or None,
                    success_threshold=success_threshold,
                    step_timeout_s=step_timeout,
                    episode_timeout_s=episode_timeout,
                    model_timeout_s=model_timeout,
                    max_retries=max_retries,
                    format_retries=format_retries,
                    fail_fast=fail_fast,
                    cache=str(cache) if cache is not None else None,
                    trust_remote_code=trust_remote_code,
                    tool_calling=tool_calling,
                )
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise typer.BadParameter(f"{where}: {first['msg']}") from None
            try:
                check_model(config)
            except (ConfigError, PluginError) as exc:
                raise typer.BadParameter(str(exc), param_hint="MODEL") from None
            try:
                check_rewards(config.rewards or [])
            except (ConfigError, PluginError) as exc:
                raise typer.BadParameter(str(exc), param_hint="--reward") from None
            result = evaluate(
                config,
                output_dir=output,
                run_dir=run_dir,
                progress=bar,
                env_headers=headers,
                hub_token=hub_token,
                argv=_redacted_argv(),
                executor=executor,
            )
    except KeyboardInterrupt as exc:
        target = exc.run_dir if isinstance(exc, RunInterrupted) else resume_dir or run_dir
        if target is not None and (target / MANIFEST).is_file():
            typer.echo(
                f"interrupted: finished episodes are saved in {target}; finish with "
                f"taskhub eval --resume {target}",
                err=True,
            )
        else:
            typer.echo(
                "interrupted before the run started: no run.json was written, so there is "
                "nothing to resume; run the command again",
                err=True,
            )
        raise typer.Exit(code=130) from None
    except TaskhubError as exc:
        raise fail(exc) from None
    if as_json:
        payload = {
            "run_dir": str(result.run_dir),
            "run_id": result.manifest.run_id,
            "status": result.manifest.status,
            "summary": result.summary.model_dump(mode="json"),
        }
        typer.echo(json.dumps(payload, indent=2))
    else:
        out = Console()
        out.print(summary_table(result.summary, result.manifest, result.run_dir))
        if len(result.summary.components) > 1:
            out.print(component_table(result.summary))
        if show_tasks:
            out.print(task_table(result.summary, show_tasks))
    summary = result.summary
    if summary.n_episodes and summary.outcomes.get("infra_error") == summary.n_episodes:
        typer.echo(
            f"every episode ({summary.n_episodes}) ended in an infra error: "
            f"{_first_error(result.run_dir)}. The env or the model endpoint failed, or the env "
            f"does not fit the taskset; episodes.jsonl in {result.run_dir} has each error.",
            err=True,
        )
        raise typer.Exit(code=1)
    if result.manifest.status != "completed":
        raise typer.Exit(code=1)


def _first_error(run_dir: Path) -> str:
    """``Type: message`` of the first infra error recorded in a run."""
    for record in iter_results(run_dir):
        if record.outcome == "infra_error" and record.error is not None:
            return f"{record.error.type}: {record.error.message}"
    return "no error was recorded"


def _finished(run_dir: Path) -> bool:
    """Say so and return True when ``--resume`` names a run that is already complete."""
    try:
        manifest = read_manifest(run_dir)
    except TaskhubError:
        return False  # resume reports it
    if manifest.status != "completed":
        return False
    when = f", completed {manifest.finished_at:%Y-%m-%d %H:%M} UTC" if manifest.finished_at else ""
    typer.echo(
        f"run {manifest.run_id} in {run_dir} is finished ({manifest.n_planned} episodes{when}): "
        f"nothing to resume. See it with taskhub results show {run_dir}"
    )
    return True
