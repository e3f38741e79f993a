"""Check a run's setup without training: `python -m skyrl_train.entrypoints.validate <same arguments as training>`
(`--config` presets and overrides).

Checks, in order, and reports every failure (exit status 1 if any): the config; the tokenizer and model config of
`trainer.policy.model.path` (weights are not loaded); the dataset files; each env on the first rows of each (data
source, env class): made, `init` on the row's prompt, one `step` with an empty action, closed. The checks live in
`skyrl_train.preflight` (`validate_setup`), beside the training preflight that runs the same env checks.
"""

from __future__ import annotations

import sys
import traceback

from skyrl_train.preflight import validate_setup as validate

__all__ = ["main", "validate"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    try:
        return validate(args)
    except Exception:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
