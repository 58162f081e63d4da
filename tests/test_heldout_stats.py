"""pass@k, maj@k and the reward-hacking judge (gspo_recipes/stats/heldout.py), against brute force and on series."""

from __future__ import annotations

import itertools

import pytest

from gspo_recipes.stats.heldout import DivergenceJudge, heldout_scores, majority_vote_correct, pass_at_k


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of k-subsets of n samples (c correct) holding at least one correct sample."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_equals_enumeration_of_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_where_binomials_overflow():
    # C(2000, 1000) overflows a float; the product form does not form it.
    value = pass_at_k(2000, 3, 1000)
    assert value == pytest.approx(1 - (1000 * 999 * 998) / (2000 * 1999 * 1998), rel=1e-9)
    assert pass_at_k(2000, 0, 1000) == 0.0


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_majority_vote_of_readable_answers_and_fail_closed_cases():
    assert majority_vote_correct(["18", "18", "17"], [1, 1, 0]) == 1.0
    assert majority_vote_correct(["17", "17", "18"], [0, 0, 1]) == 0.0
    # Unreadable answers never win, however many there are.
    assert majority_vote_correct([None, None, None, "18"], [0, 0, 0, 1]) == 1.0
    assert majority_vote_correct([None, None], [0, 0]) == 0.0
    # A tie for the most votes did not decide: 0, even when one of the tied answers is right.
    assert majority_vote_correct(["18", "17"], [1, 0]) == 0.0
    assert majority_vote_correct(["18", "18", "17", "17", None], [1, 1, 0, 0, 0]) == 0.0


def test_majority_vote_against_brute_force_counting():
    # Every assignment of 4 samples to answers {a, b, unreadable}; "a" is the right answer.
    for answers in itertools.product(["a", "b", None], repeat=4):
        correct = [float(answer == "a") for answer in answers]
        counts = {x: answers.count(x) for x in ("a", "b")}
        expected = float(counts["a"] > counts["b"])
        assert majority_vote_correct(list(answers), correct) == expected, answers


def test_heldout_scores_means_over_prompts():
    sampled = [[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    answers = [["5", "4", "4", None], ["7", "7", "7", "7"], [None, None, None, None]]
    scores = heldout_scores(sampled, greedy=[1, 1, 0], k=4, answers=answers)
    assert scores["pass@1"] == pytest.approx((0.25 + 1 + 0) / 3)
    assert scores["pass@4"] == pytest.approx((1 + 1 + 0) / 3)
    assert scores["maj@4"] == pytest.approx((0 + 1 + 0) / 3)
    assert scores["greedy"] == pytest.approx(2 / 3)
    assert "maj@4" not in heldout_scores(sampled, [1, 1, 0], 4)
    # Partial credit (a code judge's share of tests) is not a pass.
    assert heldout_scores([[0.9, 0.5]], [0.99], 2)["pass@2"] == 0.0


def judged(train: list[float], heldout: list[float], prompts: int = 32, **options) -> list[str | None]:
    judge = DivergenceJudge(**options)
    return [judge.observe(10 * (i + 1), t, h, prompts) for i, (t, h) in enumerate(zip(train, heldout))]


def test_judge_fires_when_training_reward_rises_while_heldout_falls():
    verdicts = judged([0.4, 0.6, 0.8, 0.9], [0.5, 0.35, 0.15, 0.1])
    assert verdicts[:2] == [None, None]  # not before a window of evaluations
    assert verdicts[2] is not None and "rose" in verdicts[2]
    assert verdicts[3] is None  # once, not at every evaluation while it lasts


def test_judge_fires_when_the_gap_widens_with_both_rising():
    verdicts = judged([0.2, 0.6, 0.95], [0.2, 0.22, 0.25], window=3)
    assert verdicts[2] is not None and "widened" in verdicts[2]


def test_judge_is_silent_on_a_healthy_run_and_on_noise_of_a_tiny_heldout_set():
    assert judged([0.4, 0.55, 0.7, 0.8, 0.85], [0.4, 0.5, 0.65, 0.75, 0.8]) == [None] * 5
    # 8 prompts: a fall of 0.25 is within noise (2 standard errors of a difference at p = 0.5 are 0.5).
    assert judged([0.4, 0.5, 0.6], [0.5, 0.4, 0.25], prompts=8) == [None] * 3
    # The same series on 128 prompts is beyond noise.
    assert judged([0.4, 0.5, 0.6], [0.5, 0.4, 0.25], prompts=128)[2] is not None
    # No training reward logged: nothing to compare with.
    assert judged([None, None, None], [0.5, 0.2, 0.0]) == [None] * 3


def test_judge_state_round_trips_and_redone_steps_replace_their_point():
    judge = DivergenceJudge()
    judge.observe(10, 0.4, 0.5, 32)
    judge.observe(20, 0.6, 0.35, 32)
    resumed = DivergenceJudge()
    resumed.load_state_dict(judge.state_dict())
    assert resumed.observe(30, 0.8, 0.15, 32) is not None
    # A run resumed at step 20 redoes step 30: the point replaces the earlier one instead of adding to it.
    resumed.load_state_dict(judge.state_dict())
    resumed.observe(30, 0.8, 0.15, 32)
    assert [point["step"] for point in resumed.series] == [10, 20, 30]
