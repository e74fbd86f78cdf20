"""Bad input: specs that do not parse or name nothing, values that are not usable, plugins."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from taskhub import (
    ConfigError,
    EpisodeRecord,
    RewardSpec,
    Score,
    UnknownPluginError,
    build_reward,
    reward,
)
from tests.rewards.episodes import episode, score, score_all


@reward("tests/constant", spec_arg="value", range=(0.0, 1.0))
def constant(*, value: str) -> object:
    """Returns its argument: a number, 'nan', 'inf', or text."""

    async def score(episode: EpisodeRecord) -> object:
        if value in ("nan", "inf"):
            return float(value)
        try:
            return float(value)
        except ValueError:
            return value

    return score


@reward("tests/unbounded", spec_arg="value")
def unbounded(*, value: str) -> object:
    """Returns its argument as a number; declares no range."""

    async def score(episode: EpisodeRecord) -> Score:
        return Score(float(value), {"why": "asked"})

    return score


@pytest.mark.parametrize("text", ["", "=2", "9lives", "exact=", "a b", ":x"])
def test_specs_that_do_not_parse(text: str) -> None:
    with pytest.raises(ConfigError, match="does not parse"):
        RewardSpec.parse(text)


@pytest.mark.parametrize(
    ("text", "name", "arg", "weight", "gate"),
    [
        ("math_verify", "math_verify", None, 1.0, False),
        ("fuzzy=0.5", "fuzzy", None, 0.5, False),
        ("answer_present=gate", "answer_present", None, 1.0, True),
        ("judge:openai/gpt-4o-mini=2", "judge", "openai/gpt-4o-mini", 2.0, False),
        ("python:my_pkg.scores:exact=-1", "python", "my_pkg.scores:exact", -1.0, False),
        (r"regex:^\d+$", "regex", r"^\d+$", 1.0, False),
    ],
)
def test_specs_parse(text: str, name: str, arg: str | None, weight: float, gate: bool) -> None:
    spec = RewardSpec.parse(text)
    assert (spec.name, spec.arg, spec.weight, spec.gate) == (name, arg, weight, gate)


def test_unknown_names_suggest_the_closest() -> None:
    with pytest.raises(UnknownPluginError, match="unknown reward 'math_verfy'. Did you mean"):
        build_reward("math_verfy")
    with pytest.raises(UnknownPluginError, match="Did you mean 'think_format'"):
        build_reward("think_formt=gate")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests/constant:nan", "returned nan for task 't0': not a finite number"),
        ("tests/constant:inf", "returned inf for task 't0': not a finite number"),
        ("tests/constant:high", "returned 'high' for task 't0': not a finite number"),
        ("tests/constant:1.5", "returned 1.5 for task 't0': outside its declared range [0, 1]"),
        ("tests/constant:-0.1", "returned -0.1 for task 't0': outside its declared range [0, 1]"),
    ],
)
def test_unusable_values_are_reward_errors_naming_spec_and_task(spec: str, message: str) -> None:
    component = score(spec, episode("57", "57"))
    assert component.value is None
    assert component.error == f"reward {spec!r} {message}"


def test_a_reward_without_a_declared_range_may_return_any_finite_number() -> None:
    component = score("tests/unbounded:1.5", episode("57", "57"))
    assert component.value == 1.5 and component.details == {"why": "asked"}


def test_a_failed_component_keeps_the_others_and_voids_the_total() -> None:
    [(components, total, first_error)] = score_all(
        ["exact", "tests/constant:nan", "fuzzy=0.5"], [episode("57", "57")]
    )
    assert total is None and "tests/constant:nan" in first_error
    assert [(c.name, c.value) for c in components] == [
        ("exact", 1.0),
        ("tests/constant:nan", None),
        ("fuzzy=0.5", 1.0),
    ]


def test_gates_zero_the_total_when_they_fail() -> None:
    [(_, shut, _), (_, open_, _)] = score_all(
        ["exact", "answer_present=gate"], [episode(" ", "57"), episode("57", "57")]
    )
    assert shut == 0.0 and open_ == 1.0
    assert not math.isnan(open_)


def test_a_third_party_package_adds_rewards_through_the_entry_point(tmp_path: Path) -> None:
    # an installed distribution, as pip leaves it: a package and its dist-info
    package = tmp_path / "acme_rewards"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            from taskhub import reward

            @reward("acme/shouting", range=(0, 1))
            def shouting():
                \"\"\"1 when the answer is in capitals.\"\"\"
                async def score(episode):
                    answer = episode.steps[-1].action["answer"]
                    return float(answer.isupper())
                return score

            def exclaims(completion):
                return float(completion.endswith("!"))
            """
        )
    )
    info = tmp_path / "acme_rewards-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-rewards\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[taskhub.rewards]\nacme = acme_rewards\n")
    (info / "top_level.txt").write_text("acme_rewards\n")
    (info / "RECORD").write_text("acme_rewards/__init__.py,,\n")
    code = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(Path(__file__).resolve().parents[2])!r}]
        from taskhub import build_reward, score_episode
        from tests.rewards.episodes import episode
        bound = build_reward("acme/shouting")
        print(asyncio.run(score_episode(episode("YES", "x"), [bound]))[1])
        # a python: reward from an installed package records the package's version
        print(build_reward("python:acme_rewards:exclaims").plugin.version)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["1.0", "acme-rewards 1.0"]
