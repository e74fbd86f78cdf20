"""``taskhub results show`` on 100k and 1M episodes: time, peak memory, growth.

Each size is one run directory of synthetic records (real ``EpisodeRecord`` JSON, ~1.4 KB each,
4 samples per task; see ``_episodes.py``) with the index a run writes as it goes. Every
command runs in a fresh process (interpreter start and imports included), its wall time and
peak RSS measured:

- ``results show --json``: the command, reading the run's index;
- the same with the index moved away: the records parsed by pyarrow's JSON reader, block by
  block;
- a floor for any reader of the records: pyarrow's JSON reader over the whole file, the summary
  columns only, nothing else done;
- at the smallest size, the way ``results show`` read runs before: an ``EpisodeRecord`` per
  line, then ``summarize``.

Targets: 1M episodes in <= 10 s and <= 1 GB peak RSS; time at 1M / time at 100k <= 11.

    python bench/results.py [--sizes 100000,1000000] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _episodes import write_run  # noqa: E402

FLOOR = """
import sys
import pyarrow as pa, pyarrow.json as pj
usage = pa.struct([("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()),
                   ("calls", pa.int64())])
schema = pa.schema([("task_id", pa.string()), ("outcome", pa.string()), ("reward", pa.float64()),
                    ("success", pa.bool_()), ("num_steps", pa.int64()), ("usage", usage),
                    ("duration_s", pa.float64())])
table = pj.read_json(sys.argv[1], parse_options=pj.ParseOptions(
    explicit_schema=schema, unexpected_field_behavior="ignore"))
print(table.num_rows)
"""
RECORDS = """
import sys
from taskhub import read_run, summarize
run = read_run(sys.argv[1])
print(summarize(run.records, n_planned=run.manifest.n_planned).n_episodes)
"""


# Runs a command and prints its wall time and peak RSS. A child's peak RSS counts what the
# process it was forked from held at the fork, so the command is started from this small one.
LAUNCH = """
import os, subprocess, sys, time
started = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(proc.pid, 0)
print(os.waitstatus_to_exitcode(status), time.perf_counter() - started,
      usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
"""


def measure(argv: list[str]) -> tuple[float, float]:
    """Run ``argv`` in a fresh process; return its wall time (s) and peak resident memory (MB).

    The CPU time it took is kept in ``CPU`` (steadier than wall time on a shared machine).
    """
    out = subprocess.run(
        [sys.executable, "-c", LAUNCH, *argv], capture_output=True, text=True, check=True
    )
    code, seconds, cpu, peak = out.stdout.split()
    if code != "0":
        raise SystemExit(f"{argv} failed:\n{out.stderr}")
    CPU.append(float(cpu))
    return float(seconds), float(peak)


CPU: list[float] = []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the runs")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="taskhub-bench-results-"))
    work.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    show = [python, "-m", "taskhub", "results", "show", "--json"]
    shown: dict[int, float] = {}
    print(
        f"{'episodes':>9} {'MB':>7} | {'show s':>7} {'show MB':>8} | {'no index s':>10} "
        f"{'MB':>6} | {'floor s':>7} {'MB':>6} | show/floor"
    )
    try:
        for n in sizes:
            run = write_run(work, f"bench-{n}", n)
            episodes = run / "episodes.jsonl"
            index = run / "episodes.index.csv"
            seconds, peak = measure([*show, str(run)])
            shown[n] = seconds
            show_cpu = CPU[-1]
            moved = work / "index.csv"
            index.rename(moved)
            try:
                plain, plain_peak = measure([*show, str(run)])
            finally:
                moved.rename(index)
                os.utime(index)  # newer than the records again, as the writer leaves it
            floor, floor_peak = measure([python, "-c", FLOOR, str(episodes)])
            print(
                f"{n:>9} {episodes.stat().st_size / 1e6:>7.0f} | {seconds:>7.2f} {peak:>8.0f} | "
                f"{plain:>10.2f} {plain_peak:>6.0f} | {floor:>7.2f} {floor_peak:>6.0f} | "
                f"{seconds / floor:>10.2f}",
                flush=True,
            )
            print(
                f"{'':>9} CPU s: show {show_cpu:.2f}, no index {CPU[-2]:.2f}, floor {CPU[-1]:.2f}",
                flush=True,
            )
            if n == sizes[0]:
                before, before_peak = measure([python, "-c", RECORDS, str(run)])
                print(
                    f"{'':>9} an EpisodeRecord per line, then summarize: {before:.2f} s, "
                    f"{before_peak:.0f} MB ({before / seconds:.1f}x the time of results show)",
                    flush=True,
                )
            if not args.keep:
                shutil.rmtree(run)
        for small, large in zip(sizes, sizes[1:], strict=False):
            print(
                f"growth: results show at {large} / at {small} = "
                f"{shown[large] / shown[small]:.1f} (target <= {1.1 * large / small:.0f})"
            )
        print("targets: 1M episodes in <= 10 s and <= 1024 MB peak RSS")
    finally:
        if args.keep:
            print(f"kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
