"""Tasksets in training loops: TRL's GRPOTrainer and OpenPipe ART.

The same tasks that evaluate a model train it, through the same code: ``TrainingEnv`` launches
or reaches the taskset's env and plays episodes through the evaluation agent loop, so a prompt
built here is the prompt ``taskhub eval`` sends, and a reward computed here is the reward it
records.

- ``taskset_dataset``: a ``datasets.Dataset`` with a ``prompt`` column for ``GRPOTrainer``.
- ``TasksetReward``: a TRL reward function scoring completions with taskhub's rewards.
- ``EnvRollout`` + ``episode_reward``: a TRL ``rollout_func`` playing multi-turn episodes.
- ``TasksetEnvironment``: a TRL ``environment_factory`` environment (tool-calling models).
- ``art_trajectory_groups``: episode records as OpenPipe ART trajectory groups.

Nothing here imports ``datasets``, ``torch``, ``trl`` or ``art`` until it is used.
"""

from __future__ import annotations

from taskhub._episode import EpisodePlan
from taskhub.training._art import art_trajectory, art_trajectory_dicts, art_trajectory_groups
from taskhub.training._env import ReplayModel, TrainingEnv
from taskhub.training._trl import (
    EnvRollout,
    EpisodeTokens,
    ScoredCompletion,
    TasksetEnvironment,
    TasksetReward,
    completion_text,
    episode_reward,
    task_columns,
    taskset_dataset,
)

__all__ = [
    "EnvRollout",
    "EpisodePlan",
    "EpisodeTokens",
    "ReplayModel",
    "ScoredCompletion",
    "TasksetEnvironment",
    "TasksetReward",
    "TrainingEnv",
    "art_trajectory",
    "art_trajectory_dicts",
    "art_trajectory_groups",
    "completion_text",
    "episode_reward",
    "task_columns",
    "taskset_dataset",
]
