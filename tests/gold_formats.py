"""Every gold of the shared GSM8K and MATH-500 files written in each answer format the graders support, honest and
with a wrong correction appended: the rows `test_math_gold_formats.py` scores (and `benchmarks/` may reuse)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path


def _data_folder() -> Path:
    """`../shared/data` beside the checkout (CI's layout), found from any ancestor (a worktree sits deeper);
    `GSPO_SHARED_DATA` overrides."""
    if os.environ.get("GSPO_SHARED_DATA"):
        return Path(os.environ["GSPO_SHARED_DATA"])
    root = Path(__file__).resolve().parents[1]
    found = [folder / "shared" / "data" for folder in root.parents if (folder / "shared" / "data").is_dir()]
    return found[0] if found else root.parent / "shared" / "data"


DATA = _data_folder()
GSM8K_FILE, MATH500_FILE = DATA / "gsm8k_test.jsonl", DATA / "math500_test.jsonl"
INSTRUCTION = "Return your final response within \\boxed{}. "

# Each answer marker, as an honest completion ends: given its reasoning and its final answer (as LaTeX).
FORMATS = {
    "boxed": lambda reasoning, answer: f"{reasoning}\n\nSo the final answer is $\\boxed{{{answer}}}$.",
    "fbox": lambda reasoning, answer: f"{reasoning}\n\n$\\fbox{{{answer}}}$",
    "answer tags": lambda reasoning, answer: f"<think>\n{reasoning}\n</think>\n<answer>\n{answer}\n</answer>",
    "answer tags, one line": lambda reasoning, answer: f"<think>{reasoning}</think><answer>{answer}</answer>",
    "#### line": lambda reasoning, answer: f"{reasoning}\n#### {answer}",
    "answer line": lambda reasoning, answer: f"{reasoning}\n\nAnswer: ${answer}$",
    "the answer is": lambda reasoning, answer: f"{reasoning}\n\nThe answer is ${answer}$.",
    "bold answer": lambda reasoning, answer: f"{reasoning}\n\n**Final answer:** ${answer}$",
    "answer heading": lambda reasoning, answer: f"{reasoning}\n\n## Final Answer\n\n${answer}$",
    "Russian": lambda reasoning, answer: f"{reasoning}\n\nОтвет: ${answer}$",
    "Chinese": lambda reasoning, answer: f"{reasoning}\n\n答案是 ${answer}$",
    "German": lambda reasoning, answer: f"{reasoning}\n\nDie Antwort ist ${answer}$.",
}
# Markers that may have prose after them (an answer line is the completion's last line by definition).
CHECKABLE = ("boxed", "fbox", "answer tags", "answer tags, one line", "#### line")
CHECK = "\n\nLet's check our answer: we go through the steps again. {line} Every step agrees."
WAIT = "\n\nWait, I should double-check this. {line} Hmm, the answer is not 0."


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def gsm8k_parts(row: dict) -> tuple[str, str]:
    """A GSM8K gold solution as (reasoning without its `#### N` line, N)."""
    reasoning, _, number = row["answer"].rpartition("####")
    return reasoning.strip(), number.strip()


def math_reasoning(solution: str) -> str:
    """A MATH worked solution with its boxes unwrapped: the reasoning, committing to nothing by itself."""
    out, i = [], 0
    for match in re.finditer(r"\\boxed\s*\{", solution):
        if match.start() < i:
            continue
        depth, j = 1, match.end()
        while j < len(solution) and depth:
            depth += {"{": 1, "}": -1}.get(solution[j], 0)
            j += 1
        out.append(solution[i : match.start()] + solution[match.end() : j - 1])
        i = j
    return "".join(out) + solution[i:]


def check_line(reasoning: str) -> str:
    """A check of the reasoning's last step: its last calculation, or its last math span, restated."""
    spans = re.findall(r"<<([^<>]*)>>|(?<!\\)\$([^$\n]{1,80})\$", reasoning.replace("$$", "$"))
    spans = [calculation or math for calculation, math in spans if not re.search(r"[A-Za-z]{4}", calculation or math)]
    return f"Indeed, ${spans[-1]}$ holds." if spans else "It all adds up."
