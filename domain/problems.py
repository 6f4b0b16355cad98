"""One error type for input that cannot be used: it carries every problem found, so a user fixes
them all in one round instead of one per run."""

from __future__ import annotations


class ProblemsError(ValueError):
    """Subclasses name what was invalid in `heading`; the message lists each problem."""

    heading = "invalid input"

    def __init__(self, problems: list[str]):
        self.problems = problems
        bullet_list = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"{self.heading}:\n{bullet_list}")
