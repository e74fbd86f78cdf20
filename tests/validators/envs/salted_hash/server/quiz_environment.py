"""Defect: each question is tagged from hash() of a string, which Python salts per process, so a
recorded episode replays differently after a restart."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# the corpus shares one protocol server: tests/validators/envs/_lite
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_lite"))

from openenv_lite import QuizEnvironment, create_app  # noqa: E402

__all__ = ["QuizEnv", "create_app"]

TAGS = (
    "amber azure beige black brass bronze cedar coral cream denim ebony fawn flax gold grape "
    "hazel honey indigo ivory jade khaki lemon lilac lime linen maple mauve mint moss navy "
    "ochre olive onyx peach pearl pine plum rose ruby rust sage sand slate steel tan teal "
    "topaz umber wheat wine"
).split()


class QuizEnv(QuizEnvironment):
    """The quiz, served as is."""

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        op: str = "add",
        digits: int = 1,
    ) -> dict[str, Any]:
        super().reset(seed=seed, episode_id=episode_id, op=op, digits=digits)
        # stable within one process, different in the next: str hashes are salted per process
        tag = TAGS[hash(f"{op}-{seed}") % len(TAGS)]
        self.question = f"[{tag}] {self.question}"
        return self.observe(None)

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
        return super().step(action)
