"""One episode, wherever it is played (``taskhub eval``, training): how it starts, how it ends.

``plan_episode`` decides the seeds, episode id, reset payload and step limit of an episode;
``record_episode`` turns what was played into its ``EpisodeRecord`` (outcome, error, rewards,
success). The runner and ``taskhub.training`` both go through these two, so an episode trained
on starts and is scored exactly as an evaluated one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from taskhub._agent import EpisodeTrace
from taskhub._errors import AgentFormatError
from taskhub._rewards import BoundReward, score_episode
from taskhub._schema import SCHEMA_VERSION, EpisodeRecord, ErrorInfo, Task, trusted

#: Step limit when neither the run, the row nor the card sets one.
DEFAULT_MAX_STEPS = 100
#: Longest wait for a free session on a server at capacity before the episode is an infra error.
CAPACITY_WAIT_S = 600.0


def derive_seed(*parts: object) -> int:
    """Return a deterministic 31-bit seed from ``parts``."""
    digest = hashlib.sha256("\0".join(str(p) for p in parts).encode()).hexdigest()
    return int(digest[:8], 16) % 2**31


@dataclass(frozen=True)
class EpisodePlan:
    """How an episode is started: the same values wherever a task is run (eval or training)."""

    task: Task
    """The task played."""
    sample: int
    """Sample index of the task (0..samples-1)."""
    task_hash: str
    """sha256 of the task row's canonical JSON."""
    reset_payload: dict[str, Any]
    """The ``data`` of the reset frame: the row's reset kwargs, seed and episode id."""
    env_seed: int
    """The seed sent to ``reset()``."""
    episode_id: str
    """The episode id sent to ``reset()``."""
    model_seed: int
    """The model's sampling seed for this episode."""
    max_steps: int
    """Steps before the episode is truncated."""


def plan_episode(
    task: Task,
    sample: int,
    *,
    run_seed: int,
    max_steps: int | None = None,
    card_max_steps: int | None = None,
    model_seed: int | None = None,
    task_hash: str | None = None,
) -> EpisodePlan:
    """Decide the seeds, episode id, reset payload and step limit of one episode.

    The env seed is the row's own ``seed`` when it pins one, else derived from the run seed and
    the task id (the same for every sample, so samples replay the same task); the model seed is
    derived per sample unless fixed; the episode id depends on the task's content, the sample
    and the run seed only, so identical runs send identical frames.

    Args:
        task: The task to play.
        sample: Its sample index.
        run_seed: The run seed (``taskhub eval --seed``).
        max_steps: The run's step limit, overriding the row's and the card's.
        card_max_steps: The taskset card's step limit.
        model_seed: A fixed model seed for every episode (None: derived per sample).
        task_hash: ``task.content_hash()``, when the caller has it already.

    Returns:
        The plan.
    """
    task_hash = task_hash or task.content_hash()
    env_seed = task.reset.get("seed")
    if not isinstance(env_seed, int) or isinstance(env_seed, bool):
        env_seed = derive_seed(run_seed, task.task_id)
    episode_id = hashlib.sha256(f"{task_hash}:{sample}:{run_seed}".encode()).hexdigest()[:32]
    return EpisodePlan(
        task=task,
        sample=sample,
        task_hash=task_hash,
        reset_payload={"seed": env_seed, "episode_id": episode_id, **task.reset},
        env_seed=env_seed,
        episode_id=episode_id,
        model_seed=model_seed
        if model_seed is not None
        else derive_seed(run_seed, task.task_id, sample),
        max_steps=max_steps or task.max_steps or card_max_steps or DEFAULT_MAX_STEPS,
    )


async def record_episode(
    episode: EpisodePlan,
    trace: EpisodeTrace,
    error: BaseException | None,
    *,
    run_id: str,
    split: str,
    attempts: int,
    started_at: datetime,
    duration: float,
    rewards: Sequence[BoundReward],
    success_threshold: float,
) -> EpisodeRecord:
    """Turn a played episode into its record: outcome, error, rewards, success.

    ``scored`` unless ``error`` says otherwise: an ``AgentFormatError`` is an ``agent_error``
    (scored with what it earned), anything else an ``infra_error`` (not scored). A reward that
    fails on a scored episode makes it a ``reward_error``; an agent error stays one (its failed
    component keeps the message).

    Args:
        episode: How the episode was started.
        trace: What it produced.
        error: What ended it early, if anything.
        run_id: The run it belongs to.
        split: The taskset split of its task.
        attempts: How many times it was started.
        started_at: When the last attempt started (UTC).
        duration: Wall-clock seconds of the last attempt.
        rewards: The rewards that score it.
        success_threshold: Reward at which it counts as a success.

    Returns:
        The scored record.
    """
    outcome = "scored"
    if isinstance(error, AgentFormatError):
        outcome = "agent_error"
    elif error is not None:
        outcome = "infra_error"
    initial = trace.initial
    task = episode.task
    # Every value here is typed already (observations came out of json.loads, the task was
    # validated when loaded): the record is built without validating it all over again.
    record = trusted(
        EpisodeRecord,
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        episode_id=episode.episode_id,
        task_id=task.task_id,
        task_hash=episode.task_hash,
        split=split,
        sample=episode.sample,
        seed=episode.env_seed,
        outcome=outcome,
        reward=None,
        success=None,
        reward_components=[],
        env_reward=_env_reward(trace) if initial else None,
        error=ErrorInfo.from_exception(error) if error is not None else None,
        attempts=attempts,
        terminated=trace.terminated,
        truncated=trace.truncated,
        num_steps=len(trace.steps),
        reset_payload=trace.reset_payload,
        initial_observation=initial.observation if initial else None,
        reset_metadata=initial.metadata if initial else None,
        steps=trace.steps,
        messages=trace.messages,
        usage=trace.usage,
        started_at=started_at,
        duration_s=duration,
        env_time_s=trace.env_time_s,
        model_time_s=trace.model_time_s,
        task=task,
        queue_time_s=trace.queue_time_s,
    )
    if outcome == "infra_error":
        return record
    components, total, reward_error = await score_episode(record, rewards)
    # the record is this function's own until it returns: completed in place, not copied
    record.reward_components = components
    record.reward = total
    if reward_error is not None:
        if outcome == "scored":
            record.outcome = "reward_error"
            record.error = ErrorInfo(type="RewardError", message=reward_error, boundary="reward")
    elif total is not None:
        record.success = total >= success_threshold
    return record


def _env_reward(trace: EpisodeTrace) -> float | None:
    """Sum of the step rewards the env gave; None when every step's reward was null."""
    given = [s.reward for s in trace.steps if s.reward is not None]
    if trace.steps and not given:
        return None
    return float(sum(given))
