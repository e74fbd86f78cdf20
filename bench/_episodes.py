"""Synthetic run directories for the benchmarks: real episode records, made fast.

Each record is real ``EpisodeRecord`` JSON (one single-step arithmetic episode, with its
messages and trajectory, about 1.4 KB) made from three templates (scored, agent error, infra
error) with the task id, episode id and sample substituted, so that a million records take
seconds to write. ``index_results`` then writes the index a run writes as it goes.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from taskhub import (
    ChatMessage,
    EnvInfo,
    EpisodeRecord,
    EvalConfig,
    ModelInfo,
    RewardComponent,
    RunManifest,
    SamplingParams,
    StepRecord,
    Task,
    TasksetRef,
    Usage,
    index_results,
    write_manifest,
)

SAMPLES = 4
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Markers replaced per record in the template (they cannot occur elsewhere in the JSON).
MARK = {"task": "@@TASK@@", "episode": "@@EPISODE@@", "run": "@@RUN@@"}


def templates(run_id: str) -> tuple[str, str, str, str]:
    """Record JSON for a right, a wrong, an agent-error and an infra-error episode."""
    task = Task(
        task_id=MARK["task"],
        reset={"seed": 5000, "family": "add", "difficulty": 2},
        answer="42",
        metadata={"family": "add", "difficulty": 2},
    )
    question = "What is 17 + 25?"
    base: dict[str, Any] = dict(
        run_id=MARK["run"],
        episode_id=MARK["episode"],
        task_id=MARK["task"],
        task_hash="0" * 64,
        split="test",
        sample=0,
        seed=5000,
        reset_payload={"seed": 5000, "family": "add", "difficulty": 2},
        initial_observation={"question": question, "family": "add", "difficulty": 2},
        messages=[
            ChatMessage(role="system", content="Write your final answer as \\boxed{ANSWER}."),
            ChatMessage(role="user", content=f"{question}\n\nGive your final answer."),
            ChatMessage(role="assistant", content="17 + 25 = \\boxed{42}"),
        ],
        usage=Usage(prompt_tokens=117, completion_tokens=9, calls=1),
        started_at=T0,
        duration_s=0.8,
        env_time_s=0.004,
        model_time_s=0.79,
        task=task,
    )
    step = StepRecord(
        index=0,
        action={"answer": "17 + 25 = \\boxed{42}"},
        observation={"question": question, "feedback": "correct", "parsed_answer": "42"},
        reward=1.0,
        done=True,
        reply="17 + 25 = \\boxed{42}",
        latency_s=0.002,
        model_latency_s=0.79,
    )
    scored = EpisodeRecord(
        **base,
        outcome="scored",
        reward=1.0,
        success=True,
        reward_components=[RewardComponent(name="env", value=1.0)],
        env_reward=1.0,
        terminated=True,
        num_steps=1,
        steps=[step],
    )
    agent = scored.model_copy(
        update={"outcome": "agent_error", "reward": 0.0, "success": False, "steps": []}
    )
    infra = scored.model_copy(
        update={"outcome": "infra_error", "reward": None, "success": None, "steps": []}
    )
    right = scored.model_dump_json().replace(MARK["run"], run_id)
    wrong = right.replace('"reward":1.0', '"reward":0.0').replace(
        '"success":true', '"success":false'
    )
    return (
        right,
        wrong,
        agent.model_dump_json().replace(MARK["run"], run_id),
        infra.model_dump_json().replace(MARK["run"], run_id),
    )


def write_run(
    folder: Path,
    run_id: str,
    n: int,
    *,
    model: str = "openai/model-a",
    taskset: str = "arith",
    skill: float = 0.5,
    fingerprint: str = "0" * 64,
    seed: int = 0,
) -> Path:
    """Write a completed run of ``n`` episodes (``SAMPLES`` per task) and its index."""
    rng = random.Random(seed)
    right, wrong, agent, infra = templates(run_id)
    run_dir = folder / run_id
    provider, _, name = model.partition("/")
    write_manifest(
        run_dir,
        RunManifest(
            run_id=run_id,
            taskhub_version="0.1.0",
            status="completed",
            created_at=T0,
            updated_at=T0 + timedelta(hours=1),
            config=EvalConfig(model=model, taskset=taskset, samples=SAMPLES),
            taskset=TasksetRef(
                source=taskset, kind="builtin", name=taskset, fingerprint=fingerprint
            ),
            split="test",
            env=EnvInfo(spec="arith", kind="builtin", urls=["http://127.0.0.1:1"]),
            model=ModelInfo(
                spec=model,
                provider=provider,
                name=name,
                sampling=SamplingParams(temperature=0.7),
            ),
            n_planned=n,
        ),
    )
    with (run_dir / "episodes.jsonl").open("w", encoding="utf-8") as f:
        lines = []
        for i in range(n):
            draw = rng.random()
            text = (
                infra
                if draw < 0.01
                else agent
                if draw < 0.05
                else right
                if draw < 0.05 + skill
                else wrong
            )
            lines.append(
                text.replace(MARK["task"], f"{taskset}-{i // SAMPLES:07d}")
                .replace(MARK["episode"], f"{seed:02d}{i:030d}")
                .replace('"sample":0', f'"sample":{i % SAMPLES}')
            )
            if len(lines) == 10_000:
                f.write("\n".join(lines) + "\n")
                lines = []
        if lines:
            f.write("\n".join(lines) + "\n")
    index_results(run_dir)
    return run_dir
