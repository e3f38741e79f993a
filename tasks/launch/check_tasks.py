"""Parse task YAMLs with SkyPilot's own parser (offline, no credentials) and print what it understood, as JSON.

    bash tasks/launch/setup_sky.sh
    .venv/sky/bin/python tasks/launch/check_tasks.py tasks/*.yaml [--env EVAL_RUN_NAME=x]

Runs in the SkyPilot client venv (.venv/sky), not the training venv. One JSON object per file: name, num_nodes,
resources_mode and resources (accelerators, disk_size, cpus, memory of each
choice), envs, inline secret names, secret names to pass
at launch (null in the YAML), file_mounts, workdir, setup and run. A file SkyPilot rejects exits with status 1 and
its name on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys


def _resources_mode(resources) -> str:
    """'any_of' (a set of choices), 'ordered' (a list, tried in order) or 'single'."""
    if len(resources) <= 1:
        return "single"
    return "ordered" if isinstance(resources, list) else "any_of"


def describe(path: str, env: list[tuple[str, str]]) -> dict:
    import sky
    import yaml

    with open(path) as f:
        config = yaml.safe_load(f)
    task = sky.Task.from_yaml_config(config, env_overrides=env or None)
    resources = sorted(
        (
            {
                "accelerators": r.accelerators,
                "disk_size": r.disk_size,
                "cpus": r.cpus,
                "memory": r.memory,
            }
            for r in task.resources
        ),
        key=lambda r: json.dumps(r, sort_keys=True),
    )
    return {
        "file": path,
        "name": task.name,
        "num_nodes": task.num_nodes,
        "resources_mode": _resources_mode(task.resources),
        "resources": resources,
        "envs": task.envs,
        "inline_secrets": sorted(task.secrets),
        "launch_secrets": sorted(ref.name for ref in task.managed_secret_refs),
        "file_mounts": task.file_mounts,
        "workdir": task.workdir,
        "setup": task.setup,
        "run": task.run,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="like `sky launch --env`")
    args = parser.parse_args(argv)
    env = [tuple(item.split("=", 1)) for item in args.env]
    described = []
    for path in args.files:
        try:
            described.append(describe(path, env))
        except Exception as e:  # SkyPilot raises ValueError, jsonschema errors, ...: report the file either way
            print(f"check_tasks: {path}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    json.dump(described, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
