"""``load_taskset`` on 100k and 1M rows, JSON Lines and parquet: time, peak memory, growth.

Rows are arithmetic tasks like the built-in ``arith`` taskset's (``task_id``, ``reset`` with
three kwargs, ``answer``, ``metadata`` with three fields; ~200 bytes of JSON), written to a
taskset folder per size and format. Every command runs in a fresh process (interpreter start
and imports included), its wall time, CPU time and peak RSS measured:

- ``load_taskset``: every row checked, the fingerprint (every row's content hash) computed,
  and the first and last rows read as ``Task`` objects;
- the floor of reading the rows as Python objects: ``json.loads`` of every line, or
  ``pyarrow`` reading the parquet file and turning it into Python rows (the loader makes no
  such object per row where the rows allow it, so it can load below these);
- at the smallest size, the way tasksets were loaded before: a ``Task`` validated per row, and
  the fingerprint hashed from them.

Targets: 1M rows in <= 5 s and <= 1 GB peak RSS; parquet no slower than JSON Lines.

    python bench/tasksets.py [--sizes 100000,1000000] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

LOAD = """
import sys
from taskhub import load_taskset
taskset = load_taskset(sys.argv[1])
tasks = taskset.tasks("train")
print(len(tasks), tasks[0].task_id, tasks[-1].task_id, taskset.ref.fingerprint[:12])
"""
FLOOR_JSONL = """
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1] + "/data/train.jsonl", encoding="utf-8")]
print(len(rows))
"""
FLOOR_PARQUET = """
import sys
import pyarrow.parquet as pq
rows = pq.read_table(sys.argv[1] + "/data/train.parquet").to_pylist()
print(len(rows))
"""
BEFORE = """
import hashlib, sys
from pathlib import Path
from taskhub._taskset import _read_files, _validate_rows
tasks = _validate_rows("train", _read_files(sorted(Path(sys.argv[1], "data").iterdir())))
digest = hashlib.sha256(b"train\\n")
for task in tasks:
    digest.update(task.content_hash().encode() + b"\\n")
print(len(tasks), digest.hexdigest()[:12])
"""
# Runs a command and prints its wall time, CPU time and peak RSS. A child's peak RSS counts
# what the process it was forked from held at the fork, so it is started from this small one.
LAUNCH = """
import os, subprocess, sys, time
started = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, text=True)
out = proc.stdout.read()
_, status, usage = os.wait4(proc.pid, 0)
print(os.waitstatus_to_exitcode(status), time.perf_counter() - started,
      usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.strip().replace(" ", "_"))
"""
CARD = "---\ntaskhub:\n  env: arith\n---\n# bench\n"


def rows(n: int) -> list[dict[str, object]]:
    rng = random.Random(n)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 9999), rng.randint(1, 999)
        difficulty = 1 + i % 5
        out.append(
            {
                "task_id": f"arith-add-d{difficulty}-s{i:07d}",
                "reset": {"seed": i, "family": "add", "difficulty": difficulty},
                "answer": str(a + b),
                "metadata": {
                    "family": "add",
                    "difficulty": difficulty,
                    "question": f"What is {a} + {b}?",
                },
            }
        )
    return out


def write_tasksets(work: Path, n: int) -> dict[str, Path]:
    data = rows(n)
    folders = {}
    for kind in ("jsonl", "parquet"):
        folder = work / f"{kind}-{n}"
        (folder / "data").mkdir(parents=True)
        (folder / "README.md").write_text(CARD)
        if kind == "jsonl":
            with (folder / "data" / "train.jsonl").open("w", encoding="utf-8") as f:
                for row in data:
                    f.write(json.dumps(row) + "\n")
        else:
            pq.write_table(pa.Table.from_pylist(data), folder / "data" / "train.parquet")
        folders[kind] = folder
    return folders


def measure(argv: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds, peak RSS (MB) and output of ``argv`` in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", LAUNCH, *argv], capture_output=True, text=True, check=True
    )
    code, wall, cpu, peak, printed = out.stdout.split()
    if code != "0":
        raise SystemExit(f"{argv} failed:\n{out.stderr}")
    return float(wall), float(cpu), float(peak), printed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the tasksets")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="taskhub-bench-tasksets-"))
    work.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    loads: dict[tuple[str, int], float] = {}
    print(
        f"{'rows':>8} {'format':>8} | {'load s':>7} {'cpu s':>6} {'MB':>6} | "
        f"{'floor s':>7} {'cpu s':>6} {'MB':>6} | load/floor"
    )
    try:
        for n in sizes:
            folders = write_tasksets(work, n)
            fingerprints = set()
            for kind, folder in folders.items():
                wall, cpu, peak, printed = measure([python, "-c", LOAD, str(folder)])
                fingerprints.add(printed.split("_")[-1])
                loads[kind, n] = wall
                floor_script = FLOOR_JSONL if kind == "jsonl" else FLOOR_PARQUET
                f_wall, f_cpu, f_peak, _ = measure([python, "-c", floor_script, str(folder)])
                print(
                    f"{n:>8} {kind:>8} | {wall:>7.2f} {cpu:>6.2f} {peak:>6.0f} | "
                    f"{f_wall:>7.2f} {f_cpu:>6.2f} {f_peak:>6.0f} | {wall / f_wall:>10.2f}",
                    flush=True,
                )
                if n == sizes[0]:
                    b_wall, b_cpu, b_peak, before = measure([python, "-c", BEFORE, str(folder)])
                    print(
                        f"{'':>8} {'':>8}   a Task per row (before): {b_wall:.2f} s, "
                        f"{b_cpu:.2f} s CPU, {b_peak:.0f} MB ({b_wall / wall:.1f}x the time)",
                        flush=True,
                    )
                    fingerprints.add(before.split("_")[-1])
            print(f"{'':>8} same fingerprint everywhere: {len(fingerprints) == 1}", flush=True)
            print(
                f"{'':>8} parquet / jsonl load time: "
                f"{loads['parquet', n] / loads['jsonl', n]:.2f} (target <= 1)"
            )
            if not args.keep:
                for folder in folders.values():
                    shutil.rmtree(folder)
        for small, large in zip(sizes, sizes[1:], strict=False):
            for kind in ("jsonl", "parquet"):
                print(
                    f"growth {kind}: load at {large} / at {small} = "
                    f"{loads[kind, large] / loads[kind, small]:.1f}"
                )
        print("targets: 1M rows in <= 5 s and <= 1024 MB peak RSS; parquet <= jsonl")
    finally:
        if args.keep:
            print(f"kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
