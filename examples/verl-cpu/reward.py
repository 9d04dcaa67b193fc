"""Reward for the CPU harness: verl's gsm8k rule score plus a small shaping term.

A random model never writes ``#### <answer>``, so the rule score alone is 0 for every sample, every
GRPO group has zero variance and the policy gradient is exactly 0. The shaping term (up to 0.1, the
share of digits in the response) differs between samples of a group, so advantages and gradients
are not zero and the update path does real work.
"""

from verl.utils.reward_score import gsm8k

SHAPING_WEIGHT = 0.1


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    score = float(gsm8k.compute_score(solution_str, ground_truth))
    if solution_str:
        digits = sum(ch.isdigit() for ch in solution_str)
        score += SHAPING_WEIGHT * digits / len(solution_str)
    return score
