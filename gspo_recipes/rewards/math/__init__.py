"""Math rewards: `math_accuracy` (MATH-style golds) and `gsm8k_accuracy` (GSM8K's `#### N` golds).

Both follow the final-answer contract (`contract.py`); `contract=False` or the `*_lenient` names keep math-verify's
own, lenient reading (`lenient.py`). math-verify runs in deadline-pool workers (`verifier.py`).
"""

from .contract import boxed_contents
from .graders import gsm8k_accuracy, gsm8k_accuracy_lenient, math_accuracy, math_accuracy_lenient
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
