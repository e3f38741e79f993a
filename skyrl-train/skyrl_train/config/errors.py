"""The one error type of the config layer."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config is invalid. `problems` lists every problem found, each naming its dotted key(s)."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            message = f"{len(self.problems)} config problems:\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message)
