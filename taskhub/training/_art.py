"""Episode records as OpenPipe ART trajectories: messages and reward, grouped per task.

ART's GRPO loop trains on ``TrajectoryGroup`` objects: the trajectories of one task, each a
list of chat messages and a reward. Records of evaluation runs (or of ``TrainingEnv``) become
such groups here. The assistant turns are plain messages without token logprobs (an evaluation
does not record them), so train on them with ART's ``allow_training_without_logprobs``.
Records without a reward (infra and reward errors) are left out and counted in the group's
metadata.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from taskhub._errors import MissingDependencyError
from taskhub._schema import EpisodeRecord

_INSTALL_HINT = "pip install 'taskhub-openenv[art]'"


def art_trajectory(record: EpisodeRecord) -> dict[str, Any]:
    """One record as the fields of an ART ``Trajectory`` (JSON data).

    Raises:
        ValueError: The record has no reward (an infra or reward error).
    """
    if record.reward is None:
        raise ValueError(
            f"episode {record.task_id}#{record.sample} has no reward ({record.outcome})"
        )
    metadata: dict[str, str | int | float | bool | None] = {
        "task_id": record.task_id,
        "run_id": record.run_id,
        "episode_id": record.episode_id,
        "split": record.split,
        "sample": record.sample,
        "outcome": record.outcome,
        "success": record.success,
    }
    metrics: dict[str, float | int | bool] = {
        "num_steps": record.num_steps,
        "duration_s": record.duration_s,
        "terminated": record.terminated,
    }
    if record.env_reward is not None:
        metrics["env_reward"] = record.env_reward
    for component in record.reward_components:
        if component.value is not None:
            metrics[f"reward/{component.name}"] = component.value
    return {
        "messages_and_choices": [{"role": m.role, "content": m.content} for m in record.messages],
        "reward": float(record.reward),
        "metadata": metadata,
        "metrics": metrics,
    }


def art_trajectory_dicts(records: Iterable[EpisodeRecord]) -> list[dict[str, Any]]:
    """Records as ART trajectory groups in JSON form, one group per task (in first-seen order).

    Returns:
        ``[{"trajectories": [...], "metadata": {"task_id": ..., "skipped": N}}, ...]``.
    """
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    skipped: dict[str, int] = defaultdict(int)
    order: list[str] = []
    for record in records:
        if record.task_id not in groups and record.task_id not in skipped:
            order.append(record.task_id)
        if record.reward is None:
            skipped[record.task_id] += 1
            continue
        groups[record.task_id].append(art_trajectory(record))
    return [
        {
            "trajectories": groups.get(task_id, []),
            "metadata": {"task_id": task_id, "skipped": skipped.get(task_id, 0)},
        }
        for task_id in order
    ]


def art_trajectory_groups(records: Iterable[EpisodeRecord]) -> list[Any]:
    """Records as ``art.TrajectoryGroup`` objects, one per task, for ART's training loop.

    Importing ART imports litellm, which downloads a model price list at import time unless
    ``LITELLM_LOCAL_MODEL_COST_MAP=True`` is set (set it offline).

    Raises:
        MissingDependencyError: ``openpipe-art`` is not installed.
    """
    try:
        import art
    except ImportError:
        raise MissingDependencyError(
            f"art_trajectory_groups needs OpenPipe ART: {_INSTALL_HINT}"
        ) from None
    out = []
    for group in art_trajectory_dicts(records):
        trajectories = [art.Trajectory(**t) for t in group["trajectories"]]
        out.append(art.TrajectoryGroup(trajectories, metadata=group["metadata"]))
    return out
