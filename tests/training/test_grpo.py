"""Real GRPO steps on CPU (TRL + SmolLM2-135M): the trainer consumes taskhub's rows and rewards.

Both tests run examples/grpo_arith.py's ``run``, so the example the README points to is what is
tested. They are slow (about a minute each on 2 cores; the model is converted from its GGUF once
per session).
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from taskhub import load_taskset
from taskhub.training import EnvRollout, TasksetReward
from tests.training.conftest import ROOT, evaluate_completions

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    # TRL 1.16's config sets transformers' deprecated `gradient_checkpointing` alias itself.
    pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning"),
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]


def _example() -> Any:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import grpo_arith
    finally:
        sys.path.remove(str(ROOT / "examples"))
    return grpo_arith


def test_grpo_logs_the_rewards_taskhub_computes(smollm2_dir: Path, tmp_path: Path) -> None:
    report = _example().run(
        steps=2,
        generations=4,
        max_completion_length=24,
        model_cache=smollm2_dir,
        output_dir=tmp_path / "out",
    )
    trainer, scorer = report["_trainer"], report["_scorer"]
    assert isinstance(scorer, TasksetReward)
    assert report["steps"] == trainer.state.global_step == 2
    assert len(scorer.history) == 8

    # the trainer's rows are taskhub's rows: one task per step, its 4 completions scored
    by_step: dict[int, list[Any]] = defaultdict(list)
    for item in scorer.history:
        by_step[item.step].append(item)
    assert sorted(by_step) == [0, 1]
    dataset = trainer.train_dataset
    for step, items in by_step.items():
        assert {i.task_id for i in items} == {dataset[step]["task_id"]}

    # TRL logged, per step, the mean of exactly the rewards taskhub returned
    for entry in report["per_step"]:
        rewards = entry["taskhub_rewards"]
        assert len(rewards) == 4
        assert math.isclose(entry["trl_logged_reward_mean"], sum(rewards) / 4, abs_tol=1e-6)
    # and its completions table (last generation batch) holds the same prompts, texts, rewards
    last = by_step[1]
    assert [c[-1]["content"] for c in trainer._logs["completion"]] == [i.completion for i in last]
    assert list(trainer._logs["rewards"]["taskhub"]) == [i.reward for i in last]
    assert all(p == dataset[1]["prompt"] for p in trainer._logs["prompt"])

    # an evaluation replaying the same completions gives the same rewards
    taskset = load_taskset("arith")
    tasks = {t.task_id: t for t in taskset.tasks("train")}
    plays = [
        (tasks[items[0].task_id], [i.completion for i in items])
        for _, items in sorted(by_step.items())
    ]
    evaluated = evaluate_completions("arith", plays, tmp_path / "eval")
    for task, _ in plays:
        scored = [i.reward for i in scorer.history if i.task_id == task.task_id]
        assert scored == [evaluated[(task.task_id, s)].reward for s in range(4)]


def test_rollout_trains_on_multi_turn_episodes(
    smollm2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is "experimental" in TRL
    report = _example().run(
        steps=1,
        generations=2,
        max_completion_length=96,
        max_turn_tokens=24,
        multi_turn=True,
        model_cache=smollm2_dir,
        output_dir=tmp_path / "out",
    )
    trainer, rollout = report["_trainer"], report["_scorer"]
    assert isinstance(rollout, EnvRollout)
    assert report["steps"] == 1 and len(rollout.records) == 2
    rewards = [r.reward for r in rollout.records]
    assert all(r is not None for r in rewards)
    logged = report["per_step"][0]["trl_logged_reward_mean"]
    assert math.isclose(logged, sum(rewards) / 2, abs_tol=1e-6)  # type: ignore[arg-type]

    tokenizer = trainer.processing_class
    prompt = trainer.train_dataset[0]["prompt"]
    for record, tokens in zip(rollout.records, rollout.tokens, strict=True):
        assert record.task_id == trainer.train_dataset[0]["task_id"]
        assert [m.model_dump() for m in record.messages[:2]] == prompt
        assert tokenizer.decode(tokens.prompt_ids) == tokenizer.apply_chat_template(
            prompt, tokenize=False, add_generation_prompt=True
        )
        n = len(tokens.completion_ids)
        assert n == len(tokens.env_mask) == len(tokens.logprobs) and 0 < n <= 96
        # several model turns (a move, or a reply shown back as unusable) with the env between
        turns = [m for m in record.messages if m.role == "assistant"]
        assert len(turns) >= 2
        assert 0 in tokens.env_mask and tokens.env_mask[0] == 1
        # prompt + completion tokens spell the conversation as the chat template writes it
        text = tokenizer.decode(tokens.prompt_ids + tokens.completion_ids)
        upto_last_user = max(i for i, m in enumerate(record.messages) if m.role == "user")
        head = tokenizer.apply_chat_template(
            [m.model_dump() for m in record.messages[: upto_last_user + 1]],
            tokenize=False,
            add_generation_prompt=True,
        )
        assert text.startswith(head)
        model_text = tokenizer.decode(
            [t for t, m in zip(tokens.completion_ids, tokens.env_mask, strict=True) if m],
            skip_special_tokens=True,
        )
        assert model_text == "".join(m.content for m in turns)


def test_environment_factory_runs_in_trl_tool_loop(
    smollm2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from taskhub.training import TasksetEnvironment, TrainingEnv, taskset_dataset

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is "experimental"
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    tokenizer.padding_side = "left"
    # SmolLM2 speaks ChatML but its template has no tool calls: use TRL's ChatML (Qwen2.5) one
    tokenizer.chat_template = (
        Path(trl.__file__).parent / "chat_templates/qwen2_5.jinja"
    ).read_text()
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    taskset = load_taskset("gridworld")
    created: list[TasksetEnvironment] = []
    with TrainingEnv(taskset, max_steps=3) as env:
        dataset = taskset_dataset(env, "train", tasks=taskset.tasks("train")[:1])

        def factory() -> TasksetEnvironment:
            created.append(TasksetEnvironment(env))
            return created[-1]

        trainer = GRPOTrainer(
            model=model,
            args=GRPOConfig(
                output_dir=str(tmp_path / "out"),
                per_device_train_batch_size=2,
                num_generations=2,
                max_completion_length=32,
                max_steps=1,
                logging_steps=1,
                save_strategy="no",
                report_to=[],
                bf16=False,
                use_cpu=True,
                gradient_checkpointing=False,
            ),
            train_dataset=dataset,
            processing_class=tokenizer,
            environment_factory=factory,
        )
        trainer.train()
    records = [e.record for e in created if e.record is not None]
    assert len(records) == 2  # TRL reset and scored one environment per rollout
    task = taskset.tasks("train")[0]
    plan = env.plan(task)
    for record in records:
        assert (record.task_id, record.reset_payload) == (task.task_id, plan.reset_payload)
        assert record.initial_observation is not None
    logged = trainer.state.log_history[0]["rewards/TasksetEnvironment/mean"]
    assert math.isclose(logged, sum(r.reward or 0.0 for r in records) / 2, abs_tol=1e-6)


def test_grpo_trains_on_the_tool_env_through_trl_s_tool_loop(
    smollm2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is "experimental"
    report = _example().run_tool_envs(
        steps=1, generations=2, model_cache=smollm2_dir, output_dir=tmp_path / "out"
    )
    trainer, episodes = report["_trainer"], report["_episodes"]
    assert report["steps"] == trainer.state.global_step == 1
    # one ledger row and one arith row, two rollouts each, each scored as evaluation scores it
    assert sorted(r.task_id.split("-")[0] for r in episodes) == ["arith"] * 2 + ["ledger"] * 2
    assert all(r.outcome in ("scored", "agent_error") for r in episodes)
    (logged,) = [h for h in trainer.state.log_history if "loss" in h]
    for env_class, prefix in (("LedgerTools", "ledger"), ("TasksetEnvironment", "arith")):
        rewards = [r.reward or 0.0 for r in episodes if r.task_id.startswith(prefix)]
        assert math.isclose(logged[f"rewards/{env_class}/mean"], sum(rewards) / 2, abs_tol=1e-6)
    # the model saw the ledger's own tools, one function each
    tools = {t["function"]["name"] for t in trainer.tools if isinstance(t, dict)} or {
        getattr(t, "__name__", "") for t in trainer.tools
    }
    assert {"lookup", "calculate", "submit", "step"} <= tools
