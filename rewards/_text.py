r"""Answer-vs-reference rewards: exact, contains, regex:PATTERN, fuzzy, chrf, bleu, rougeL.

Each compares ``final_answer`` with the row's reference answer(s) (a list answer gives several;
the best match counts) and returns a value in [0, 1]. An empty or missing answer scores 0, never
a match, whatever the metric would say (``fuzz.ratio("", "")`` is 100). A row without a
reference is a ``reward_error``. They are cheap and run inline, in the event loop (a
``regex:`` search under a deadline).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import regex as regex_lib

from taskhub import ConfigError, EpisodeRecord, RewardError, RewardFn, Score, reward

from ._answer import final_answer, has_answer, references
from ._deps import require, version_of

UNIT = (0.0, 1.0)
_WHITESPACE = re.compile(r"\s+")


def unit(value: float) -> float:
    """Clip float noise at the ends of [0, 1] (sacrebleu scores a perfect match 100.00000000000004).

    Values further out are left alone, for the declared range to report.
    """
    if -1e-9 < value < 0.0:
        return 0.0
    if 1.0 < value < 1.0 + 1e-9:
        return 1.0
    return value


def _normalizer(mode: str | None, name: str) -> Callable[[str], str]:
    if mode is None:
        return str.strip
    if mode == "ci":
        return lambda text: _WHITESPACE.sub(" ", text).strip().casefold()
    raise ConfigError(f"reward {name!r}: unknown mode {mode!r}; use {name} or {name}:ci")


def _clip(text: str | None, size: int = 200) -> str | None:
    return text if text is None or len(text) <= size else text[: size - 1] + "…"


def _no_answer(answer: str | None) -> Score:
    return Score(0.0, {"answer": answer, "why": "no answer"})


@reward("exact", spec_arg="mode", range=UNIT)
def exact(*, mode: str | None = None) -> RewardFn:
    """1 when the answer equals a reference, outer whitespace aside (exact:ci also folds case)."""
    norm = _normalizer(mode, "exact")

    async def score(episode: EpisodeRecord) -> Score:
        refs = references(episode, "exact")
        answer = final_answer(episode)
        if not has_answer(answer):
            return _no_answer(answer)
        assert answer is not None
        return Score(float(norm(answer) in {norm(r) for r in refs}), {"answer": _clip(answer)})

    return score


@reward("contains", spec_arg="mode", range=UNIT)
def contains(*, mode: str | None = None) -> RewardFn:
    """1 when a reference occurs in the answer (contains:ci ignores case)."""
    norm = _normalizer(mode, "contains")

    async def score(episode: EpisodeRecord) -> Score:
        refs = [norm(r) for r in references(episode, "contains")]
        answer = final_answer(episode)
        if not has_answer(answer):
            return _no_answer(answer)
        assert answer is not None
        text = norm(answer)
        return Score(float(any(r and r in text for r in refs)), {"answer": _clip(answer)})

    return score


#: Longest a ``regex:`` search may run: a pattern that backtracks catastrophically on some
#: answer, such as ``(a+)+$``, gives a reward error instead of freezing the run.
REGEX_TIMEOUT_S = 1.0


@reward("regex", spec_arg="pattern", range=UNIT)
def regex(*, pattern: str, timeout_s: float = REGEX_TIMEOUT_S) -> RewardFn:
    r"""1 when the pattern is found in the answer (re.search; anchor it: regex:^\d+$).

    The search runs with the ``regex`` library (``re``-compatible) under ``timeout_s``.
    """
    try:
        compiled = regex_lib.compile(pattern)
    except regex_lib.error as exc:
        raise ConfigError(f"regex:{pattern}: not a valid regular expression: {exc}") from None

    async def score(episode: EpisodeRecord) -> Score:
        answer = final_answer(episode)
        if not has_answer(answer):
            return _no_answer(answer)
        assert answer is not None
        try:
            found = compiled.search(answer, timeout=timeout_s) is not None
        except TimeoutError:
            raise RewardError(
                f"regex:{pattern} did not finish within {timeout_s:g}s on a "
                f"{len(answer)}-character answer (catastrophic backtracking)"
            ) from None
        return Score(float(found), {"answer": _clip(answer)})

    return score


_FUZZ_SCORERS = (
    "ratio",
    "partial_ratio",
    "token_sort_ratio",
    "token_set_ratio",
    "WRatio",
    "QRatio",
)


@reward("fuzzy", spec_arg="scorer", range=UNIT, version=version_of("rapidfuzz"))
def fuzzy(*, scorer: str = "ratio") -> RewardFn:
    """Rapidfuzz similarity of answer and reference, 0-1 (fuzzy:token_set_ratio, other scorers)."""
    rapidfuzz = require("rapidfuzz.fuzz", reward="fuzzy", package="rapidfuzz", extra="text")
    if scorer not in _FUZZ_SCORERS:
        raise ConfigError(f"fuzzy:{scorer}: unknown scorer; use one of {', '.join(_FUZZ_SCORERS)}")
    fn: Callable[[str, str], float] = getattr(rapidfuzz, scorer)

    async def score(episode: EpisodeRecord) -> Score:
        refs = references(episode, "fuzzy")
        answer = final_answer(episode)
        if not has_answer(answer):
            return _no_answer(answer)
        assert answer is not None
        best = max(fn(answer.strip(), ref.strip()) for ref in refs) / 100.0
        return Score(unit(best), {"answer": _clip(answer)})

    return score


@reward("chrf", range=UNIT, version=version_of("sacrebleu"))
def chrf() -> RewardFn:
    """Sentence chrF (sacrebleu) of the answer against the references, 0-1."""
    sacrebleu = require("sacrebleu", reward="chrf", package="sacrebleu", extra="text")

    async def score(episode: EpisodeRecord) -> Score:
        refs = references(episode, "chrf")
        answer = final_answer(episode)
        if not has_answer(answer):
            return _no_answer(answer)
        result = sacrebleu.sentence_chrf(answer, refs)
        return Score(unit(float(result.score) / 100.0), {"answer": _clip(answer)})

    return score


@reward("bleu", range=UNIT, version=version_of("sacrebleu"))
def bleu() -> RewardFn:
    """Sentence BLEU (sacrebleu, exponential smoothing) of the answer against the references."""
    sacrebleu = require("sacrebleu", reward="bleu", package="sacrebleu", extra="text")

    async def score(episode: EpisodeRecord) -> Score:
        refs = references(episode, "bleu")
        answer = final_answer(episode)
        if not has_answer(answer):
            return _no_answer(answer)
        result = sacrebleu.sentence_bleu(answer, refs)
        return Score(unit(float(result.score) / 100.0), {"answer": _clip(answer)})

    return score


@reward("rougeL", range=UNIT, version=version_of("rouge-score"))
def rouge_l() -> RewardFn:
    """ROUGE-L F-measure (rouge-score, Porter stemming), best over the references, 0-1."""
    module = require(
        "rouge_score.rouge_scorer", reward="rougeL", package="rouge-score", extra="text"
    )
    scorer: Any = module.RougeScorer(["rougeL"], use_stemmer=True)

    async def score(episode: EpisodeRecord) -> Score:
        refs = references(episode, "rougeL")
        answer = final_answer(episode)
        if not has_answer(answer):
            return _no_answer(answer)
        best = max(float(scorer.score(ref, answer)["rougeL"].fmeasure) for ref in refs)
        return Score(unit(best), {"answer": _clip(answer)})

    return score
