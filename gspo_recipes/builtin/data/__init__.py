"""Datasets generated offline, so recipes and tests run with no network."""

from gspo_recipes.builtin.data.synthetic_gsm import (
    PROMPT_SUFFIX,
    extract_final_answer,
    format_prompt,
    is_correct,
    make_gsm_dataset,
    make_gsm_problems,
)

__all__ = [
    "PROMPT_SUFFIX",
    "extract_final_answer",
    "format_prompt",
    "is_correct",
    "make_gsm_dataset",
    "make_gsm_problems",
]
