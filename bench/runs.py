"""A run's memory as its episodes add up, and a resume's at 100k and 1M episodes.

- **Resume.** A run of ``n`` episodes (synthetic records, as ``results.py`` writes them: real
  ``EpisodeRecord`` JSON of about 1.4 KB, ``SAMPLES`` per task, with the index a run keeps)
  stopped before its last 8 episodes, against a JSON Lines taskset of its tasks; ``taskhub eval
  --resume`` then plays those 8 on the built-in arith env with the scripted oracle. Measured in
  a fresh process: wall time (the env server's start included) and peak RSS. At the smallest
  size, the way resume read a run before, for comparison: an ``EpisodeRecord`` per line, and
  what the summary kept of each.
- **A run.** ``taskhub eval scripted/oracle`` against the built-in arith env's server (launched
  here, so that its memory is not counted) at 8 sessions, for ``--episodes`` and ten times as
  many (the 300 train tasks, sampled as often as it takes): peak RSS of each, and what each
  episode added to it.

Targets: a resume of 1M episodes in <= 1 GB peak RSS; a run holds <= 1 KB per episode played
(a million-episode run under 1 GB more than a small one).

    python bench/runs.py [--sizes 100000,1000000] [--episodes 3000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from _episodes import SAMPLES, write_run  # noqa: E402
from results import CPU, measure  # noqa: E402

from taskhub import EvalConfig, index_results, load_taskset, read_manifest, write_manifest
from taskhub.env import LocalServer, builtin_envs, launch_server, wait_healthy

LEFT = 8  # episodes the resume plays
TARGET_RESUME_MB = 1024
TARGET_RUN_KB = 1.0

BEFORE = """
import sys
from taskhub import read_results
from taskhub._runner import summary_row
records = read_results(sys.argv[1])
rows = [summary_row(r) for r in records]
print(len(rows))
"""


def stopped_run(work: Path, n: int) -> Path:
    """A run of ``n`` episodes over its own taskset, its last ``LEFT`` episodes not played."""
    name = f"resume{n}"
    tasks = work / f"{name}.jsonl"
    with tasks.open("w") as f:
        for k in range(n // SAMPLES):
            row = {
                "task_id": f"{name}-{k:07d}",
                "reset": {"seed": 5000 + k, "family": "add", "difficulty": 2},
                "answer": "42",
            }
            f.write(json.dumps(row) + "\n")
    taskset = load_taskset(str(tasks))
    (split,) = taskset.splits
    run_dir = write_run(work, name, n, taskset=name)
    manifest = read_manifest(run_dir)
    config = EvalConfig(
        model="scripted/oracle", taskset=str(tasks), env="arith", split=split, samples=SAMPLES
    )
    write_manifest(
        run_dir,
        manifest.model_copy(
            update={"status": "interrupted", "config": config, "taskset": taskset.ref}
        ),
    )
    episodes = run_dir / "episodes.jsonl"
    with episodes.open("rb+") as f:  # the last LEFT lines cut, as if never written
        f.seek(0, 2)
        end = f.tell()
        f.seek(max(0, end - 64 * 1024))
        tail = f.read()
        cut = end - len(tail) + [i for i, b in enumerate(tail) if b == 0x0A][-LEFT - 1] + 1
        f.truncate(cut)
    index_results(run_dir)  # kept in step with the records, as a run keeps it
    return run_dir


async def _healthy(server: LocalServer) -> None:
    async with httpx.AsyncClient() as http:
        await wait_healthy(http, server.url, server=server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="taskhub-bench-runs-"))
    work.mkdir(parents=True, exist_ok=True)
    taskhub = [sys.executable, "-m", "taskhub"]
    try:
        print(f"{'episodes':>9} | {'resume s':>8} {'CPU s':>6} {'peak MB':>8}")
        peaks = {}
        for n in sizes:
            run_dir = stopped_run(work, n)
            seconds, peak = measure([*taskhub, "eval", "--resume", str(run_dir), "--no-progress"])
            peaks[n] = peak
            print(f"{n:>9} | {seconds:>8.2f} {CPU[-1]:>6.2f} {peak:>8.0f}", flush=True)
            if n == sizes[0]:
                before, before_peak = measure([sys.executable, "-c", BEFORE, str(run_dir)])
                print(
                    f"{'':>9}   as resume read a run before (a record per line, a summary row "
                    f"kept of each): {before:.2f} s, {before_peak:.0f} MB",
                    flush=True,
                )
            shutil.rmtree(run_dir)
        largest = max(sizes)
        print(
            f"resume of {largest} episodes: {peaks[largest]:.0f} MB peak RSS "
            f"(target <= {TARGET_RESUME_MB} MB): "
            + ("PASS" if peaks[largest] <= TARGET_RESUME_MB else "FAIL")
        )
        print(f"{'episodes':>9} | {'run s':>8} {'CPU s':>6} {'peak MB':>8}")
        run_peaks = {}
        server = launch_server(builtin_envs()["arith"], max_sessions=16)
        try:
            asyncio.run(_healthy(server))
            for n in (args.episodes, 10 * args.episodes):
                samples = -(-n // 300)
                argv = [*taskhub, "eval", "scripted/oracle", server.url, "arith", "--no-progress"]
                argv += ["--samples", str(samples), "--limit", str(n // samples), "-c", "8"]
                seconds, peak = measure([*argv, "-o", str(work / "runs")])
                played = n // samples * samples
                run_peaks[n] = (played, peak)
                print(f"{played:>9} | {seconds:>8.2f} {CPU[-1]:>6.2f} {peak:>8.0f}", flush=True)
        finally:
            server.stop()
        (small, small_peak), (large, large_peak) = run_peaks.values()
        per_episode = (large_peak - small_peak) * 1024 / (large - small)
        verdict = "PASS" if per_episode <= TARGET_RUN_KB else "FAIL"
        print(
            f"a run's peak RSS grew by {per_episode:.2f} KB per episode "
            f"(target <= {TARGET_RUN_KB} KB): {verdict}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
