r"""``math_verify``: Hugging Face math-verify's equivalence check, run in the reward process pool.

The answer and the reference are each parsed with math-verify's default extraction (LaTeX,
``\boxed{}`` first, then plain expressions); a bare expression (``2\sqrt{3}``, ``1+x^2``, the
usual form of a reference answer) is read inside ``$...$``, where plain extraction would keep
only its first number (see ``parse_math``). The answer scores 1 when
``verify(reference, answer)`` holds for any reference. An answer that does not parse scores 0;
a reference that does not parse is a ``reward_error`` (the taskset is wrong, not the model).

math-verify's own timeouts use ``signal.alarm``, which fails off the main thread and cannot
interrupt sympy inside C code (``9^{9^{9^{9}}}`` hangs for ever), so they are turned off and
each call runs in a worker process under a deadline that kills it.
"""

from __future__ import annotations

from taskhub import EpisodeRecord, RewardFn, Score, reward

from ._answer import final_answer, has_answer, references
from ._batch import PoolCalls
from ._deps import check_installed, version_of
from ._math_work import verify_math
from ._pool import shared_pool


@reward("math_verify", range=(0.0, 1.0), version=version_of("math-verify"))
def math_verify_reward(*, timeout_s: float = 10.0) -> RewardFn:
    r"""1 when math-verify finds the answer equal to a reference (\boxed{}, fractions, LaTeX)."""
    check_installed("math_verify", reward="math_verify", package="math-verify", extra="math")
    pool = shared_pool()
    pool.start()  # the workers boot while the run starts its envs
    verify = PoolCalls(pool, verify_math, timeout_s=timeout_s, label="math_verify")

    async def score(episode: EpisodeRecord) -> Score:
        refs = references(episode, "math_verify")
        answer = final_answer(episode)
        if not has_answer(answer):
            return Score(0.0, {"answer": answer, "why": "no answer"})
        value, details = await verify(refs, answer)
        return Score(value, details)

    return score
