"""Math rewards: `math_accuracy` (MATH-style golds) and `gsm8k_accuracy` (GSM8K's `#### N` golds).

Both read the completion's last answer marker (`marker.py`) by one closed rule (docs/rewards.md); `contract=False`
or the `*_lenient` names keep math-verify's own, lenient reading (`lenient.py`). math-verify runs in deadline-pool
workers (`verifier.py`).
"""

from .graders import gsm8k_accuracy, gsm8k_accuracy_lenient, math_accuracy, math_accuracy_lenient
from .marker import boxed_contents
from .verifier import RELATIVE_TOLERANCE, verify_answer, verify_final_answer

__all__ = [
    "RELATIVE_TOLERANCE",
    "boxed_contents",
    "gsm8k_accuracy",
    "gsm8k_accuracy_lenient",
    "math_accuracy",
    "math_accuracy_lenient",
    "verify_answer",
    "verify_final_answer",
]
