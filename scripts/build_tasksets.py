"""Write the built-in tasksets' data files with the reference envs' own generators.

    python scripts/build_tasksets.py           # (re)write tasksets/*/data/*.jsonl
    python scripts/build_tasksets.py --check   # exit 1 when a file differs from what it would write

The output is deterministic: rerunning the script reproduces the files byte for byte. Rows are
interleaved (every family/difficulty, or size/difficulty, cell once, then again...) so that the
first rows of a split already cover every cell. Train and test use disjoint seeds, and a
question (or maze) that already appeared in either split is skipped, so no test item is a copy of
a train item. The ledger rows are the tasks the ledger env serves over OpenEnv's Task API.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Runs from a checkout, before taskhub is installed.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from taskhub._envs.arith.server.arith_environment import (  # noqa: E402
    FAMILIES,
    generate_problem,
)
from taskhub._envs.gridworld.server.gridworld_environment import generate_maze  # noqa: E402
from taskhub._envs.ledger.server.ledger_environment import tasks_of_split  # noqa: E402
from taskhub._schema import Task  # noqa: E402

TASKSETS = ROOT / "tasksets"

#: split -> (rows per cell, seeds it may use). The seed ranges of the splits are disjoint.
ARITH_SPLITS = {"train": (6, range(0, 5000)), "test": (4, range(5000, 10000))}
ARITH_DIFFICULTIES = (1, 2, 3, 4, 5)
GRID_SPLITS = {"train": (10, range(0, 5000)), "test": (5, range(5000, 10000))}
GRID_SIZES = (4, 5, 6, 7)
GRID_DIFFICULTIES = (1, 2, 3, 4, 5)


def _interleave(cells: list[Iterator[Task]], per_cell: int) -> list[Task]:
    """Take one task from each cell in turn, ``per_cell`` rounds."""
    return [next(cell) for _ in range(per_cell) for cell in cells]


def arith_tasks() -> dict[str, list[Task]]:
    """Return the rows of the ``arith`` taskset by split."""
    seen: set[str] = set()

    def cell(family: str, difficulty: int, seeds: range) -> Iterator[Task]:
        for seed in seeds:
            problem = generate_problem(family, difficulty, seed)
            if problem.question in seen:
                continue
            seen.add(problem.question)
            yield Task(
                task_id=f"arith-{family}-d{difficulty}-s{seed:04d}",
                reset={"seed": seed, "family": family, "difficulty": difficulty},
                answer=problem.answer,
                metadata={
                    "family": family,
                    "difficulty": difficulty,
                    "question": problem.question,
                },
            )
        raise RuntimeError(f"arith {family} d{difficulty}: {seeds} has too few new questions")

    return {
        split: _interleave([cell(f, d, seeds) for f in FAMILIES for d in ARITH_DIFFICULTIES], n)
        for split, (n, seeds) in ARITH_SPLITS.items()
    }


def gridworld_tasks() -> dict[str, list[Task]]:
    """Return the rows of the ``gridworld`` taskset by split."""
    seen: set[tuple[int, str]] = set()

    def cell(size: int, difficulty: int, seeds: range) -> Iterator[Task]:
        for seed in seeds:
            maze = generate_maze(size, difficulty, seed)
            key = (size, maze.render(maze.start))
            if key in seen:
                continue
            seen.add(key)
            yield Task(
                task_id=f"gridworld-n{size}-d{difficulty}-s{seed:04d}",
                reset={"seed": seed, "size": size, "difficulty": difficulty},
                oracle_actions=[{"move": move} for move in maze.solution],
                metadata={
                    "size": size,
                    "difficulty": difficulty,
                    "shortest_path": len(maze.solution),
                    "walls": len(maze.walls),
                },
            )
        raise RuntimeError(f"gridworld n{size} d{difficulty}: {seeds} has too few new mazes")

    return {
        split: _interleave([cell(s, d, seeds) for s in GRID_SIZES for d in GRID_DIFFICULTIES], n)
        for split, (n, seeds) in GRID_SPLITS.items()
    }


def ledger_tasks() -> dict[str, list[Task]]:
    """Return the rows of the ``ledger`` taskset by split: the env's own Task API tasks."""
    splits: dict[str, list[Task]] = {}
    for split in ("train", "test"):
        rows = []
        for entry in tasks_of_split(split):
            problem = entry.problem
            rows.append(
                Task(
                    task_id=entry.task_id,
                    reset={
                        "seed": problem.seed,
                        "family": problem.family,
                        "difficulty": problem.difficulty,
                    },
                    answer=problem.answer,
                    oracle_actions=problem.oracle_calls(),
                    metadata={
                        "family": problem.family,
                        "difficulty": problem.difficulty,
                        "question": problem.question,
                        "items": list(problem.needed),
                    },
                )
            )
        splits[split] = rows
    return splits


def render_jsonl(tasks: list[Task]) -> str:
    """Serialize tasks as JSON Lines, one row per line, defaults omitted."""
    return "".join(json.dumps(task.to_row(), ensure_ascii=False) + "\n" for task in tasks)


def build() -> dict[Path, str]:
    """Return every data file of the built-in tasksets: path -> content."""
    files = {}
    builders = (("arith", arith_tasks), ("gridworld", gridworld_tasks), ("ledger", ledger_tasks))
    for name, tasks_of in builders:
        splits = tasks_of()
        for split, tasks in splits.items():
            files[TASKSETS / name / "data" / f"{split}.jsonl"] = render_jsonl(tasks)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the files on disk, write nothing"
    )
    args = parser.parse_args(argv)
    stale = []
    for path, text in build().items():
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
    for path in stale:
        verb = "differs" if args.check else "written"
        print(f"{path.relative_to(ROOT)} {verb}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
