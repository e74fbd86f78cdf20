"""Results push: what a push of a large run holds, and how long its redaction takes.

Synthetic runs (real ``EpisodeRecord`` lines, ``bench/_episodes.py``) of each size are pushed
with ``taskhub.push_results`` to the loopback Hub-compatible server of the tests (in this
process), each push in a fresh process: wall seconds, peak RSS, and what each episode added
between the smallest and the largest size. ``--baseline DIR`` pushes the same runs with the
taskhub of another checkout (on ``PYTHONPATH``) after each, for an A/B in the same run.

    python bench/push.py [--sizes 5000,20000] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
os.environ["HF_HUB_DISABLE_XET"] = "1"  # the test server has no Xet storage

from _episodes import write_run  # noqa: E402

from taskhub.env._spawn import free_port  # noqa: E402
from tests.hub.hub_server import HubServer  # noqa: E402

TOKEN = "hf_bench_push_token"

CHILD = """
import resource, sys, time
from taskhub import push_results
started = time.perf_counter()
push_results(sys.argv[1], sys.argv[2], token=sys.argv[3])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{time.perf_counter() - started:.3f} {peak:.0f}")
"""


def push(code: Path, run_dir: Path, repo_id: str, hub_url: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one push in a fresh process, with ``code``'s taskhub."""
    env = dict(os.environ, HF_ENDPOINT=hub_url, PYTHONPATH=str(code), HF_HUB_DISABLE_XET="1")
    env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(run_dir), repo_id, TOKEN],
        env=env,
        cwd=tempfile.gettempdir(),  # not this checkout's folder: PYTHONPATH picks the code
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[-2]), float(out[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="5000,20000")
    parser.add_argument("--baseline", type=Path, help="another checkout to push with, A/B")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    contenders = [("taskhub", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
    results: dict[str, dict[int, tuple[float, float]]] = {name: {} for name, _ in contenders}
    with (
        tempfile.TemporaryDirectory() as tmp,
        HubServer("127.0.0.1", free_port(), tokens={TOKEN: "bench"}) as hub,
    ):
        for n in sizes:
            run_dir = write_run(Path(tmp), f"run-{n}", n)
            for name, code in contenders:
                results[name][n] = push(code, run_dir, f"bench/{name}-{n}", hub.url)
                seconds, peak = results[name][n]
                print(f"{name:>9} {n:>8} episodes: {seconds:7.1f} s, {peak:6.0f} MB peak RSS")
    low, high = min(sizes), max(sizes)
    for name, _ in contenders:
        per = (results[name][high][1] - results[name][low][1]) * 1024 / (high - low)
        ms = results[name][high][0] / high * 1e3
        print(f"{name}: {per:.2f} KB of peak RSS per episode ({low} -> {high}), {ms:.2f} ms each")


if __name__ == "__main__":
    main()
