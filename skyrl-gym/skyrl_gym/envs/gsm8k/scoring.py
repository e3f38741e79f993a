"""Rule-based GSM8K scoring: a pure function of the response text and the ground-truth string.

The answer is the number after the *last* `####` marker ("strict" format, as in upstream). A sign and a
`$` may precede the digits, thousands commas are dropped, and a decimal point only counts when digits
follow it (so a sentence-ending "#### 42." reads as "42"). The extracted string is compared to the
ground truth as a string: "18.0" does not equal "18".
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"####[ \t]*((?:\$-|-\$|-|\$)?[0-9][0-9,]*(?:\.[0-9]+)?)")


def extract_solution(solution_str: str) -> str | None:
    """The final answer after the last `#### `, with commas and `$` removed; None if there is none."""
    matches = _ANSWER.findall(solution_str or "")
    if not matches:
        return None
    return matches[-1].replace(",", "").replace("$", "")


def compute_score(solution_str: str, ground_truth: str, format_score: float = 0.0, score: float = 1.0) -> float:
    """`score` if the extracted answer equals `ground_truth`, `format_score` if an answer was found but is
    wrong, and 0.0 if the response has no `#### <number>` at all."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0.0
    return score if answer == str(ground_truth).strip() else format_score
