"""Batch validation of the defect corpus: N parallel workers against one at a time, same run.

    python bench/validate_batch.py [--workers 4] [--rounds 1]

Validates every env of tests/validators/envs (the purpose-built defective envs and the clean
one; the env that hangs is left out unless --include-hangs, since its time is its deadline) as
one batch with one worker, then with --workers workers, each into a fresh output folder, and
prints the wall time per env of each and the speed-up. Both runs must reach the same verdicts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from taskhub.validators import (  # noqa: E402
    BatchConfig,
    Submission,
    ValidationConfig,
    validate_batch_async,
)

ENVS = ROOT / "tests" / "validators" / "envs"
QUIZ = ROOT / "tests" / "validators" / "tasksets" / "quiz"


def corpus(include_hangs: bool) -> list[Submission]:
    names = sorted(p.name for p in ENVS.iterdir() if p.is_dir() and not p.name.startswith("_"))
    return [
        Submission(name=name, target=str(ENVS / name), deadline_s=15 if name == "hangs" else None)
        for name in names
        if include_hangs or name != "hangs"
    ]


async def run(submissions: list[Submission], workers: int, out: Path) -> tuple[float, dict]:
    config = BatchConfig(
        output=out,
        workers=workers,
        deadline_s=300,
        validation=ValidationConfig(taskset=str(QUIZ), op_timeout_s=3.0),
    )
    started = time.perf_counter()
    rows = await validate_batch_async(submissions, config)
    return time.perf_counter() - started, {r["name"]: r["verdict"] for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1, help="repeat both runs, keep the best")
    parser.add_argument("--include-hangs", action="store_true")
    args = parser.parse_args()
    submissions = corpus(args.include_hangs)
    n = len(submissions)
    best: dict[int, float] = {}
    verdicts: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="taskhub-bench-validate-") as tmp:
        for round_ in range(args.rounds):
            for workers in (1, args.workers):
                out = Path(tmp) / f"r{round_}-w{workers}"
                wall, verdicts[workers] = asyncio.run(run(submissions, workers, out))
                best[workers] = min(best.get(workers, wall), wall)
    if verdicts[1] != verdicts[args.workers]:
        raise SystemExit(f"verdicts differ between runs: {verdicts[1]} vs {verdicts[args.workers]}")
    seq, par = best[1], best[args.workers]
    print(
        f"corpus: {n} envs ({', '.join(sorted(set(verdicts[1].values())))} verdicts), "
        f"{os.cpu_count()} CPUs, best of {args.rounds} round(s)"
    )
    print(f"{'workers':>8} {'wall s':>8} {'s/env':>7}")
    print(f"{1:>8} {seq:>8.2f} {seq / n:>7.2f}")
    print(f"{args.workers:>8} {par:>8.2f} {par / n:>7.2f}")
    print(f"speed-up: {seq / par:.2f}x with {args.workers} workers")
    print(
        json.dumps(
            {
                "envs": n,
                "workers": args.workers,
                "sequential_s": round(seq, 2),
                "parallel_s": round(par, 2),
                "speedup": round(seq / par, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
