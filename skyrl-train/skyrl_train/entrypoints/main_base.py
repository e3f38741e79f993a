"""Train with the base config: `python -m skyrl_train.entrypoints.main_base key=value ...`.

Arguments are Hydra-style overrides of `skyrl_train/config/ppo_base_config.yaml` (`key=value`,
`+key=value`, `~key`); see `skyrl-train/docs/config_reference.md`. An invalid config exits with
status 2 and every problem, by key, on stderr.
"""

from __future__ import annotations

import sys

from skyrl_train.config import ConfigError, SkyRLConfig, load_config


def run(cfg: SkyRLConfig) -> None:
    """Train with a validated config."""
    raise NotImplementedError("trainer lands in skyrl_train.trainer (not written yet); the config is valid.")


def main(argv: list[str] | None = None) -> int:
    """Load and validate the config from `argv` overrides (default: sys.argv[1:]), then `run` it."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    try:
        cfg = load_config(args)
    except ConfigError as e:
        print(f"Invalid config: {e}", file=sys.stderr)
        return 2
    run(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
