"""Leaderboard build time and site size for 10k, 100k and 1M synthetic episode records.

The records are real ``EpisodeRecord`` JSON (one single-step arithmetic episode each, with its
messages and trajectory, about 1.4 KB) spread over 4 models x 2 tasksets (8 runs, 4 samples per
task, some agent and infra errors). For each size the benchmark builds the site and reports:

- build time, site size and file count;
- a floor measured in the same run: reading every record, parsing it with ``json.loads`` and
  writing its bytes once (a site holds every trajectory and must read every number), and
  build time / floor;
- at the smallest size, ``read_results`` (an ``EpisodeRecord`` per line) against
  ``read_results_table`` (the fast path the leaderboard uses) on the same runs;
- the growth ratio, time at the largest size / time at the size ten times smaller
  (10 for a build linear in the records).

    python bench/leaderboard.py [--sizes 10000,100000,1000000] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from taskhub.leaderboard import build_site

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
    read_results,
    read_results_table,
    write_manifest,
)

MODELS = ["openai/model-a", "openai/model-b", "local/model-c", "scripted/model-d"]
TASKSETS = ["arith", "arith-hard"]
SAMPLES = 4
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Markers replaced per record in the template (they cannot occur elsewhere in the JSON).
MARK = {"task": "@@TASK@@", "episode": "@@EPISODE@@", "run": "@@RUN@@"}


def template(run_id: str) -> tuple[str, str, str]:
    """Record JSON for a scored, an agent-error and an infra-error episode, with markers."""
    task = Task(
        task_id=MARK["task"],
        reset={"seed": 5000, "family": "add", "difficulty": 2},
        answer="42",
        metadata={"family": "add", "difficulty": 2},
    )
    question = "What is 17 + 25?"
    base = dict(
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
    return tuple(r.model_dump_json().replace(MARK["run"], run_id) for r in (scored, agent, infra))  # type: ignore[return-value]


def make_inputs(folder: Path, n: int) -> None:
    rng = random.Random(n)
    runs = [(m, t) for m in MODELS for t in TASKSETS]
    per_run = n // len(runs)
    for index, (model, taskset) in enumerate(runs):
        run_id = f"bench-{index}-{model.replace('/', '-')}-{taskset}"
        skill = 0.3 + 0.15 * MODELS.index(model) - 0.2 * TASKSETS.index(taskset)
        scored, agent, infra = template(run_id)
        wrong = scored.replace('"reward":1.0', '"reward":0.0').replace(
            '"success":true', '"success":false'
        )
        lines = []
        for i in range(per_run):
            draw = rng.random()
            text = (
                infra
                if draw < 0.01
                else agent
                if draw < 0.05
                else scored
                if draw < 0.05 + skill
                else wrong
            )
            lines.append(
                text.replace(MARK["task"], f"{taskset}-{i // SAMPLES:07d}")
                .replace(MARK["episode"], f"{index:02d}{i:030d}")
                .replace('"sample":0', f'"sample":{i % SAMPLES}')
            )
        provider, _, name = model.partition("/")
        sampling = SamplingParams(temperature=0.7)
        run_dir = folder / run_id
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
                    source=taskset, kind="builtin", name=taskset, fingerprint=f"{index % 2}" * 64
                ),
                split="test",
                env=EnvInfo(spec="arith", kind="builtin", urls=["http://127.0.0.1:1"]),
                model=ModelInfo(spec=model, provider=provider, name=name, sampling=sampling),
                n_planned=per_run,
            ),
        )
        (run_dir / "episodes.jsonl").write_text("\n".join(lines) + "\n")


def size_of(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def io_floor(inputs: Path, scratch: Path) -> float:
    """The least any build does: read every record, parse its JSON, write its bytes once."""
    scratch.mkdir()
    started = time.perf_counter()
    for i, path in enumerate(sorted(inputs.rglob("*.jsonl"))):
        data = path.read_bytes()
        for line in data.splitlines():
            json.loads(line)
        (scratch / f"{i}.bin").write_bytes(data)
    elapsed = time.perf_counter() - started
    shutil.rmtree(scratch)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the inputs and sites")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="taskhub-bench-leaderboard-"))
    times: dict[int, float] = {}
    print(
        f"{'records':>9} {'input MB':>9} {'build s':>8} {'site MB':>8} {'files':>7} "
        f"{'floor s':>8} {'build/floor':>11}"
    )
    try:
        for n in sizes:
            inputs = work / f"inputs-{n}"
            make_inputs(inputs, n)
            input_bytes, _ = size_of(inputs)
            floor = io_floor(inputs, work / "scratch")
            started = time.perf_counter()
            build_site([inputs], work / f"site-{n}")
            times[n] = elapsed = time.perf_counter() - started
            site_bytes, files = size_of(work / f"site-{n}")
            print(
                f"{n:>9} {input_bytes / 1e6:>9.1f} {elapsed:>8.2f} {site_bytes / 1e6:>8.1f} "
                f"{files:>7} {floor:>8.2f} {elapsed / floor:>11.1f}",
                flush=True,
            )
            if n == sizes[0]:
                runs = sorted(p for p in inputs.iterdir())
                started = time.perf_counter()
                for run in runs:
                    read_results(run)
                slow = time.perf_counter() - started
                started = time.perf_counter()
                for run in runs:
                    read_results_table(run)
                fast = time.perf_counter() - started
                print(
                    f"{'':>9} reading {n} records: read_results {slow:.2f} s, "
                    f"read_results_table {fast:.2f} s ({slow / fast:.1f}x faster)",
                    flush=True,
                )
            if not args.keep:
                shutil.rmtree(inputs)
                shutil.rmtree(work / f"site-{n}")
        for small, large in zip(sizes, sizes[1:], strict=False):
            if large == 10 * small:
                print(
                    f"growth ratio: time at {large} / time at {small} = "
                    f"{times[large] / times[small]:.1f} (10.0 is linear)"
                )
    finally:
        if args.keep:
            print(f"kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
