"""Math rewards: `math_accuracy` (MATH-style golds) and `gsm8k_accuracy` (GSM8K's `#### N` golds)."""

from .graders import boxed_contents, gsm8k_accuracy, math_accuracy, verify_answer

__all__ = ["boxed_contents", "gsm8k_accuracy", "math_accuracy", "verify_answer"]
