"""Episode records built by hand, as the runner writes them, for reward tests."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from taskhub import (
    ChatMessage,
    EpisodeRecord,
    RewardComponent,
    RewardSet,
    StepRecord,
    Task,
    build_reward,
    score_episode,
)


def episode(
    answer: Any = None,
    reference: Any = None,
    *,
    task_id: str = "t0",
    reply: str | None = None,
    action: dict[str, Any] | None = None,
    steps: list[StepRecord] | None = None,
    metadata: dict[str, Any] | None = None,
    prompt: str | None = "What is the answer?",
    outcome: str = "scored",
    messages: list[ChatMessage] | None = None,
) -> EpisodeRecord:
    """A single-step episode whose action is {"answer": answer} (no step when answer is None)."""
    task = Task(task_id=task_id, answer=reference, prompt=prompt, metadata=metadata or {})
    if steps is None:
        steps = []
        if answer is not None or action is not None:
            act = action if action is not None else {"answer": answer}
            steps = [
                StepRecord(
                    index=0,
                    action=act,
                    observation={"feedback": "ok"},
                    reward=1.0,
                    done=True,
                    reply=reply if reply is not None else str(answer),
                )
            ]
    if messages is None:
        messages = [ChatMessage(role="user", content=prompt or "go")]
        messages += [ChatMessage(role="assistant", content=s.reply or "") for s in steps]
    return EpisodeRecord(
        run_id="test",
        episode_id=f"ep-{task_id}",
        task_id=task_id,
        task_hash=task.content_hash(),
        split="test",
        sample=0,
        seed=0,
        outcome=outcome,  # type: ignore[arg-type]
        reward=None,
        success=None,
        steps=steps,
        num_steps=len(steps),
        messages=messages,
        started_at=datetime.now(UTC),
        duration_s=0.0,
        task=task,
    )


def score(spec: str, record: EpisodeRecord) -> RewardComponent:
    """Build ``spec`` and score ``record`` with it through the core's score_episode."""
    components, _, _ = asyncio.run(score_episode(record, [build_reward(spec)]))
    return components[0]


def value(spec: str, record: EpisodeRecord) -> float | None:
    component = score(spec, record)
    assert component.error is None, component.error
    return component.value


def score_all(
    specs: list[str], records: list[EpisodeRecord]
) -> list[tuple[list[RewardComponent], float | None, str | None]]:
    async def run() -> list[tuple[list[RewardComponent], float | None, str | None]]:
        rewards = RewardSet().resolve(specs)
        return list(await asyncio.gather(*(score_episode(r, rewards) for r in records)))

    return asyncio.run(run())
