"""Small fixed inputs for the leaderboard tests: run directories and validation reports.

Built from the real schemas and written with the core's own writers, with fixed ids and times so
that the site built from them is byte-for-byte reproducible (the golden files). Strings that come
from models, envs and tasksets carry markup on purpose: the site must show it as text.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from taskhub import (
    ChatMessage,
    CheckResult,
    EnvInfo,
    EpisodeRecord,
    ErrorInfo,
    EvalConfig,
    ModelInfo,
    RewardComponent,
    RunManifest,
    SamplingParams,
    StepRecord,
    Task,
    TasksetRef,
    Usage,
    ValidationReport,
    write_manifest,
    write_results,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SCRIPT = "<script>alert('xss')</script>"
IMG = '"><img src=x onerror=alert(1)>'


def episode(
    run_id: str,
    task_id: str,
    *,
    sample: int = 0,
    reward: float | None = 1.0,
    outcome: str = "scored",
    threshold: float = 1.0,
    observation: str = "What is 2 + 2?",
    reply: str = "4",
    error: ErrorInfo | None = None,
    steps: int = 1,
) -> EpisodeRecord:
    """One finished episode with a trajectory of ``steps`` steps."""
    task = Task(task_id=task_id, reset={"seed": 7}, answer="4", metadata={"family": "add"})
    step_records = [
        StepRecord(
            index=i,
            action={"answer": reply},
            observation={"question": observation, "feedback": "correct" if reward else "wrong"},
            reward=(reward if i == steps - 1 else 0.0) if reward is not None else None,
            done=i == steps - 1,
            reply=reply,
            latency_s=0.004,
            model_latency_s=0.25,
        )
        for i in range(steps if outcome != "infra_error" else 0)
    ]
    return EpisodeRecord(
        run_id=run_id,
        episode_id=f"{run_id}-{task_id}-{sample}",
        task_id=task_id,
        task_hash=task.content_hash(),
        split="test",
        sample=sample,
        seed=7,
        outcome=outcome,  # type: ignore[arg-type]
        reward=reward,
        success=None if reward is None else reward >= threshold,
        reward_components=(
            [RewardComponent(name="env", value=reward)]
            if reward is not None
            else [RewardComponent(name="env", value=None, error="no reward")]
        ),
        env_reward=reward,
        error=error,
        terminated=bool(step_records),
        num_steps=len(step_records),
        reset_payload={"seed": 7, "episode_id": f"{run_id}-{task_id}-{sample}"},
        initial_observation={"question": observation},
        steps=step_records,
        messages=[
            ChatMessage(role="system", content="Answer with a number."),
            ChatMessage(role="user", content=observation),
            ChatMessage(role="assistant", content=reply),
        ],
        usage=Usage(prompt_tokens=20, completion_tokens=2, calls=steps),
        started_at=T0 + timedelta(seconds=sample),
        duration_s=0.5,
        env_time_s=0.008 * (len(step_records) + 1),
        model_time_s=0.25 * len(step_records),
        task=task,
    )


def write_run(
    root: Path,
    run_id: str,
    records: list[EpisodeRecord],
    *,
    model: str = "scripted/alpha",
    taskset: str = "arith",
    fingerprint: str = "a" * 64,
    commit_sha: str | None = None,
    env: str = "arith",
    temperature: float = 0.0,
    samples: int = 1,
    shard: tuple[int, int] | None = None,
    base_url: str | None = None,
    rewards: list[str] | None = None,
) -> Path:
    """Write a run directory (``run.json`` + ``episodes.jsonl``) under ``root``.

    ``rewards`` are ``--reward`` specs: recorded in the config, as a run before ``run.json``
    stored its comparability records them (it is recomputed from them).
    """
    provider, _, name = model.partition("/")
    sampling = SamplingParams(temperature=temperature, max_tokens=64)
    manifest = RunManifest(
        run_id=run_id,
        taskhub_version="0.1.0",
        status="completed",
        created_at=T0,
        updated_at=T0 + timedelta(minutes=1),
        finished_at=T0 + timedelta(minutes=1),
        config=EvalConfig(
            model=model,
            taskset=taskset,
            sampling=sampling,
            samples=samples,
            shard=shard,
            rewards=rewards,
        ),
        taskset=TasksetRef(
            source=taskset if commit_sha is None else f"org/{taskset}@main",
            kind="builtin" if commit_sha is None else "hub",
            name=taskset,
            repo_id=None if commit_sha is None else f"org/{taskset}",
            revision=None if commit_sha is None else "main",
            commit_sha=commit_sha,
            fingerprint=fingerprint,
        ),
        split="test",
        env=EnvInfo(
            spec=env,
            kind="builtin",
            urls=["http://127.0.0.1:9"],
            metadata={"name": env, "version": "1.0"},
        ),
        model=ModelInfo(
            spec=model, provider=provider, name=name, base_url=base_url, sampling=sampling
        ),
        n_planned=len(records),
        host={"python": "3.11"},
    )
    folder = root / run_id
    write_manifest(folder, manifest)
    write_results(folder / "episodes.jsonl", records)
    return folder


def check(id: str, status: str, severity: str = "fail", **extra: Any) -> CheckResult:
    level = id.split(".")[0]
    return CheckResult(
        id=id,
        level=level,  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        severity=severity,  # type: ignore[arg-type]
        summary=f"{id} {status}",
        **extra,
    )


def report(
    name: str, verdict: str, checks: list[CheckResult], *, target: str | None = None
) -> ValidationReport:
    return ValidationReport(
        target=target or name,
        target_kind="builtin",
        name=name,
        env_metadata={"name": name},
        policy={"name": "default", "version": "1"},
        verdict=verdict,  # type: ignore[arg-type]
        exit_code={"pass": 0, "warn": 0, "fail": 1}.get(verdict, 3),
        checks=checks,
        started_at=T0 + timedelta(hours=1),
        duration_s=12.5,
        taskhub_version="0.1.0",
    )


def build_corpus(root: Path) -> Path:
    """The golden corpus: 3 models, 2 tasksets (one at two revisions), reports for 2 envs."""
    runs = root / "runs"
    # alpha: arith, 6 tasks x 1 sample, one wrong answer.
    rid = "run-alpha-arith"
    write_run(
        runs,
        rid,
        [episode(rid, f"add-{i}", reward=0.0 if i == 3 else 1.0) for i in range(6)],
    )
    # beta (markup in its name): arith in two shards, with an agent and an infra error,
    # an observation that tries to close the page's script.
    beta = f"openai/beta{SCRIPT}"
    rid = "run-beta-arith-0"
    write_run(
        runs,
        rid,
        [
            episode(rid, "add-0", reward=0.0, observation="</script><script>alert(1)</script>"),
            episode(rid, "add-2", reward=1.0, reply=IMG),
            episode(
                rid,
                "add-4",
                reward=0.0,
                outcome="agent_error",
                error=ErrorInfo(
                    type="AgentFormatError", message=f"no action in {SCRIPT}", boundary="agent"
                ),
            ),
        ],
        model=beta,
        shard=(0, 2),
        base_url="http://127.0.0.1:9/v1",
    )
    rid = "run-beta-arith-1"
    write_run(
        runs,
        rid,
        [
            episode(rid, "add-1", reward=1.0),
            episode(rid, "add-3", reward=0.0),
            episode(
                rid,
                "add-5",
                reward=None,
                outcome="infra_error",
                error=ErrorInfo(type="EnvTimeout", message="step timed out", boundary="env"),
            ),
        ],
        model=beta,
        shard=(1, 2),
        base_url="http://127.0.0.1:9/v1",
    )
    # alpha again on a later revision of arith: its own column.
    rid = "run-alpha-arith-v2"
    write_run(
        runs,
        rid,
        [episode(rid, f"add-{i}", reward=1.0) for i in range(3)],
        fingerprint="b" * 64,
    )
    # gamma at two temperatures on a Hub taskset with 4 samples per task (pass@k).
    for temperature in (0.0, 0.7):
        rid = f"run-gamma-grid-t{temperature}"
        write_run(
            runs,
            rid,
            [
                episode(
                    rid,
                    f"maze-{t}",
                    sample=s,
                    reward=1.0 if (t + s + int(temperature * 10)) % 3 == 0 else 0.0,
                    steps=3,
                    observation="A..\n.#.\n..G",
                )
                for t in range(3)
                for s in range(4)
            ],
            model="scripted/gamma",
            taskset=f"grid{IMG}",
            fingerprint="c" * 64,
            commit_sha="1234567890abcdef1234567890abcdef12345678",
            env="gridworld",
            temperature=temperature,
            samples=4,
        )
    reports = root / "reports"
    reports.mkdir()
    (reports / "arith.json").write_text(
        report(
            "arith",
            "warn",
            [
                check("static.manifest", "pass"),
                check(
                    "runtime.episode_determinism",
                    "pass",
                    measured={"episodes": 4, "identical": 4},
                ),
                check(
                    "runtime.step_latency",
                    "pass",
                    "advisory",
                    measured={"steps": 120, "step_p50_ms": 0.42, "step_p99_ms": 3.5},
                ),
                check(
                    "semantic.no_solution_leakage",
                    "fail",
                    "warn",
                    remediation=f"Hide the answer {SCRIPT}",
                    evidence=[{"state": {"answer": "4"}}],
                ),
            ],
        ).model_dump_json(indent=2)
    )
    (reports / "gridworld.json").write_text(
        report(
            "gridworld",
            "fail",
            [
                check("static.manifest", "pass"),
                check("runtime.episode_determinism", "fail", measured={"identical": 1}),
                check("runtime.seed_control", "error"),
            ],
        ).model_dump_json(indent=2)
    )
    (reports / "summary.json").write_text('{"reports": ["arith.json", "gridworld.json"]}\n')
    return root
