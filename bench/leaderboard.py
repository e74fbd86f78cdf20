"""Leaderboard build time and site size for 10k, 100k and 1M synthetic episode records.

The records are real ``EpisodeRecord`` JSON (one single-step arithmetic episode each, with its
messages and trajectory, about 1.4 KB; see ``_episodes.py``) spread over 4 models x 2 tasksets
(8 runs, 4 samples per task, some agent and infra errors), each run with the index a run writes
as it goes. For each size the benchmark builds the site and reports:

- build time, the CPU seconds of the build (every thread of the process: pages are compressed
  and runs read on threads) and the load average as the build started (the machine is shared:
  a wall time means little without them), site size, file count and the largest file (target:
  none over 1 MB);
- a reference measured in the same run: reading every record, parsing it with ``json.loads``
  and writing its bytes once, the least a build that parses its records does, and build time /
  reference. The site parses none: its numbers come from each run's index and its episode
  pages are the records' lines as read, compressed;
- at the smallest size, ``read_results`` (an ``EpisodeRecord`` per line) against
  ``read_results_table`` (the fast path the leaderboard uses) on the same runs;
- the growth ratio, time at the largest size / time at the size ten times smaller
  (10 for a build linear in the records).

Target: 1M episodes built in <= 15 s.

    python bench/leaderboard.py [--sizes 10000,100000,1000000] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from taskhub.leaderboard import build_site

from taskhub import read_results, read_results_table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _episodes import write_run  # noqa: E402

MODELS = ["openai/model-a", "openai/model-b", "local/model-c", "scripted/model-d"]
TASKSETS = ["arith", "arith-hard"]


def make_inputs(folder: Path, n: int) -> None:
    runs = [(m, t) for m in MODELS for t in TASKSETS]
    per_run = n // len(runs)
    for index, (model, taskset) in enumerate(runs):
        write_run(
            folder,
            f"bench-{index}-{model.replace('/', '-')}-{taskset}",
            per_run,
            model=model,
            taskset=taskset,
            skill=0.3 + 0.15 * MODELS.index(model) - 0.2 * TASKSETS.index(taskset),
            fingerprint=f"{index % 2}" * 64,
            seed=index,
        )


def size_of(folder: Path) -> tuple[int, int, int]:
    """Bytes, files and the largest file's bytes under ``folder``."""
    sizes = [p.stat().st_size for p in folder.rglob("*") if p.is_file()]
    return sum(sizes), len(sizes), max(sizes, default=0)


def parse_reference(inputs: Path, scratch: Path) -> float:
    """Read every record, parse its JSON, write its bytes once: a build that parses, at least."""
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
        f"{'records':>9} {'input MB':>9} {'build s':>8} {'CPU s':>6} {'load':>5} {'site MB':>8} "
        f"{'files':>7} {'largest KB':>10} {'parse s':>8} {'build/parse':>11}"
    )
    try:
        for n in sizes:
            inputs = work / f"inputs-{n}"
            make_inputs(inputs, n)
            input_bytes, _, _ = size_of(inputs)
            parse = parse_reference(inputs, work / "scratch")
            load = os.getloadavg()[0]
            started, cpu = time.perf_counter(), time.process_time()
            build_site([inputs], work / f"site-{n}")
            times[n] = elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu
            site_bytes, files, largest = size_of(work / f"site-{n}")
            print(
                f"{n:>9} {input_bytes / 1e6:>9.1f} {elapsed:>8.2f} {cpu:>6.2f} {load:>5.2f} "
                f"{site_bytes / 1e6:>8.1f} {files:>7} {largest / 1024:>10.0f} {parse:>8.2f} "
                f"{elapsed / parse:>11.1f}",
                flush=True,
            )
            if n == sizes[0]:
                runs = sorted(inputs.iterdir())
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
        print("targets: 1M episodes built in <= 15 s; no file over 1024 KB")
    finally:
        if args.keep:
            print(f"kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
