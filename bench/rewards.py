"""math_verify throughput: taskhub's reward execution vs a plain sequential math-verify loop.

Both score the same 10,000 answers against the same references, on the same machine, in
alternating rounds. Each round measures both cold, as a new script or ``taskhub rescore`` runs,
then warm: a second pass over 10,000 other answers in the same process (math-verify's ANTLR
parsers speed up as they see inputs; taskhub's workers are then already running, as they are
in a long run). Every reference is different, so no cache of parsed references helps.

- the baseline runs in a fresh Python process that imports math-verify (not timed), then calls
  math-verify's ``parse`` and ``verify`` directly, one answer after another (timed), reading
  answers exactly as taskhub's ``math_verify`` reward does (``parse_math``: a bare LaTeX
  expression inside ``$...$``; no signal timeouts; an empty answer scores 0 uncalled);
- taskhub builds the ``math_verify`` reward, which starts its worker processes (they import
  taskhub and math-verify), and at once runs it over episode records through
  ``rescore_records``, the re-scoring path (``score_episode`` per episode, components checked,
  new records built), math-verify running in the workers as soon as they are up. The cold time
  counts all of it, start-up included, as a run does: the first calls wait for the workers.

    python bench/rewards.py [--answers 10000] [--concurrency 32] [--repeats 3]

Before each round two busy-loop processes measure how much parallelism the machine gives right
now (2.0x on 2 idle cores, less while other work shares them), which bounds any pool's speedup.
Prints every round (with how long the workers took to say they were ready, and the CPU this
process spent per answer on the cold pass: the scoring, the pool's calls and its manager
thread, all on the cores the workers need), the best times, answers/s, the speedups (best over
best, and the median round; target: >= 1.7x cold, start-up counted, on 2 idle cores) and
whether every score is identical.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

from taskhub.rewards import shared_pool

from taskhub import EpisodeRecord, RewardSet, StepRecord, Task, rescore_records


def make_answers(n: int, offset: int = 0) -> list[tuple[str, str]]:
    """``n`` (reference, answer) pairs: right and wrong, plain and LaTeX.

    Every reference is different (each holds its index, from ``offset``), so that no cache of
    parsed references (taskhub's workers keep one, for pass@k) does less work than the loop.
    """
    rng = random.Random(offset)
    pairs: list[tuple[str, str]] = []
    for i in range(offset, offset + n):
        a, b = rng.randint(1, 999), rng.randint(2, 99)
        big = 1000 * i + a
        kind = i % 10
        if kind == 0:  # integer, plain
            pairs.append((str(big), str(big)))
        elif kind == 1:  # integer in \boxed{} inside a sentence
            pairs.append((str(big), f"So the total is \\boxed{{{big}}}."))
        elif kind == 2:  # equivalent fractions
            pairs.append((f"\\frac{{{i}}}{{{b}}}", f"{i * 3}/{b * 3}"))
        elif kind == 3:  # fraction vs decimal
            pairs.append((f"\\frac{{{i}}}{{4}}", f"{i / 4}"))
        elif kind == 4:  # wrong integer
            pairs.append((str(big), str(big + 1)))
        elif kind == 5:  # radicals
            pairs.append((f"{i}\\sqrt{{2}}", f"$\\sqrt{{{2 * i * i}}}$"))
        elif kind == 6:  # an expression
            pairs.append((f"x^2 + {i}x", f"$x({i} + x)$"))
        elif kind == 7:  # a wrong fraction, boxed
            wrong = f"The answer is $\\boxed{{\\frac{{{i}}}{{{b}}}}}$"
            pairs.append((f"\\frac{{{i}}}{{{b + 1}}}", wrong))
        elif kind == 8:  # negative number in words
            pairs.append((str(-big), f"I get {-big} as the final answer"))
        else:  # no answer at all, or a bare LaTeX expression
            pairs.append((f"\\frac{{{i}}}{{{b}}}", "" if i % 20 == 9 else f"\\frac{{{i}}}{{{b}}}"))
    return pairs


def baseline(pairs: list[tuple[str, str]]) -> list[float]:
    """The plain loop: math-verify called directly, one answer after another."""
    from math_verify import verify
    from taskhub.rewards import parse_math  # math_verify.parse, reading bare LaTeX as taskhub does

    scores = []
    for reference, answer in pairs:
        if not answer.strip():
            scores.append(0.0)
            continue
        gold = parse_math(reference)
        assert gold, reference
        parsed = parse_math(answer)
        ok = bool(parsed) and verify(gold, parsed, timeout_seconds=None)
        scores.append(1.0 if ok else 0.0)
    return scores


def make_records(pairs: list[tuple[str, str]]) -> list[EpisodeRecord]:
    now = datetime.now(UTC)
    records = []
    for i, (reference, answer) in enumerate(pairs):
        task = Task(task_id=f"math-{i:05d}", answer=reference)
        records.append(
            EpisodeRecord(
                run_id="bench",
                episode_id=f"e{i}",
                task_id=task.task_id,
                task_hash=task.content_hash(),
                split="test",
                sample=0,
                seed=0,
                outcome="scored",
                reward=None,
                success=None,
                steps=[
                    StepRecord(
                        index=0, action={"answer": answer}, observation={}, reward=0.0, done=True
                    )
                ],
                num_steps=1,
                started_at=now,
                duration_s=0.0,
                task=task,
            )
        )
    return records


async def taskhub_scores(records: list[EpisodeRecord], concurrency: int) -> list[float]:
    rewards = RewardSet().resolve(["math_verify"])  # starts the worker pool
    scores = []
    async for record in rescore_records(
        records, rewards, success_threshold=1.0, concurrency=concurrency
    ):
        assert record.outcome == "scored", record.error
        assert record.reward is not None
        scores.append(record.reward)
    return scores


_SPIN = """
import time
t = time.perf_counter()
x = 0
for i in range(5_000_000):
    x += i
print(time.perf_counter() - t)
"""


def ready_after(start: float, starts: list[float]) -> None:
    """Record when the shared pool's workers are all ready, counted from ``start``."""
    shared_pool().wait_ready()
    starts.append(time.perf_counter() - start)


def machine_scaling() -> float:
    """How much more CPU work 2 processes get done than 1, right now (2.0 on 2 idle cores)."""

    def spin(n: int) -> float:
        procs = [
            subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        return max(float(p.communicate()[0]) for p in procs)

    one = spin(1)
    return 2 * one / spin(2)


def fresh_baseline(n: int) -> dict[str, tuple[float, list[float]]]:
    """Run ``baseline`` in a fresh process, cold then warm: seconds and scores of each."""
    out = subprocess.run(
        [sys.executable, __file__, "--answers", str(n), "--baseline-only"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {state: (seconds, scores) for state, (seconds, scores) in json.loads(out.stdout).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds")
    parser.add_argument("--baseline-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = args.answers

    import math_verify  # noqa: F401  (imported before either clock starts)

    # the warm pass scores other answers: its references are new to every cache
    inputs = {"cold": make_answers(n), "warm": make_answers(n, offset=n)}
    if args.baseline_only:
        result = {}
        for state, pairs in inputs.items():
            start = time.perf_counter()
            scores = baseline(pairs)
            result[state] = (time.perf_counter() - start, scores)
        print(json.dumps(result))
        return
    records = {state: make_records(pairs) for state, pairs in inputs.items()}
    print(f"{n} answers, {os.cpu_count()} CPUs, {args.repeats} alternating rounds")

    times: dict[str, dict[str, list[float]]] = {
        side: {"cold": [], "warm": []} for side in ("plain", "taskhub")
    }
    starts: list[float] = []
    parent_ms: list[float] = []  # this process's CPU per answer, cold (its threads included)
    same = True
    correct = 0.0
    for round_ in range(args.repeats):
        scaling = machine_scaling()
        plain = fresh_baseline(n)
        for state in ("cold", "warm"):  # the warm pass reuses taskhub's running workers
            start, cpu = time.perf_counter(), time.process_time()
            if state == "cold":  # how long the workers take to start, within the cold time
                threading.Thread(target=ready_after, args=(start, starts), daemon=True).start()
            got = asyncio.run(taskhub_scores(records[state], args.concurrency))
            times["taskhub"][state].append(time.perf_counter() - start)
            if state == "cold":
                parent_ms.append((time.process_time() - cpu) / n * 1e3)
            times["plain"][state].append(plain[state][0])
            same = same and got == plain[state][1]
            correct = sum(plain[state][1])
        shared_pool().shutdown()  # the next round starts its workers cold again
        rounds = ", ".join(
            f"{side} {state} {t[-1]:.2f} s" for side, d in times.items() for state, t in d.items()
        )
        print(
            f"  round {round_ + 1}: {rounds}; workers started in {starts[-1]:.2f} s;"
            f" taskhub's own process {parent_ms[-1]:.2f} ms CPU per answer (cold);"
            f" 2 processes did {scaling:.2f}x the work of 1"
        )
        if not same:
            break

    for state in ("cold", "warm"):
        base, ours = times["plain"][state], times["taskhub"][state]
        ratios = sorted(b / o for b, o in zip(base, ours, strict=True))
        print(
            f"{state}: plain loop best {min(base):.2f} s ({n / min(base):.0f} answers/s), "
            f"taskhub best {min(ours):.2f} s ({n / min(ours):.0f} answers/s): "
            f"speedup {min(base) / min(ours):.2f}x best/best, "
            f"{ratios[len(ratios) // 2]:.2f}x median round"
        )
    print(
        f"the cold times count the {min(starts):.2f}-{max(starts):.2f} s the workers took to start"
    )
    print("target: >= 1.7x cold, median round, on 2 idle cores")
    print(f"identical scores: {same} ({correct:.0f} of {n} correct in the last pass)")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
