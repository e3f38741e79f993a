"""`skyrl-analyze-evals`: summarise a run's eval dumps (local folder or `s3://.../evals/<run>`).

    skyrl-analyze-evals ~/exports/dumped_evals --step 0 --step 40 --json summary.json --html report.html
    skyrl-analyze-evals s3://skyrl-trajectories/evals/my_run --endpoint-url http://localhost:9000
    skyrl-analyze-evals ~/exports --markdown held_out.md --rule-baseline data/rule_baseline.json

Prints, per environment and overall, for each step: trajectories, pass@k, any success, mean score, average
turns and tool calls, stop reasons and failure categories with example snippets; with two or more steps, the
change from the first to the last. ``--markdown`` writes pass@1 per template and entity split at every step and
its change since the first step after `base` (`skyrl_integrations.analysis.splits`), beside the rule baseline of
``--rule-baseline``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from skyrl_gym.common.fs import atomic_write_text
from skyrl_integrations.analysis.dumps import DumpError, load_eval_dumps
from skyrl_integrations.analysis.metrics import analyze
from skyrl_integrations.analysis.report import format_html, format_text
from skyrl_integrations.analysis.splits import format_markdown, success_by_split


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skyrl-analyze-evals",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("location", help="export folder, dumped_evals/, one step folder, or s3://bucket/evals/<run>")
    parser.add_argument(
        "--step",
        action="append",
        dest="steps",
        metavar="STEP",
        help="step to analyse (a global step number, 'eval_only' or 'base'); repeat to compare; default: every step",
    )
    parser.add_argument("--json", type=Path, help="write the full summary (with examples) as JSON here")
    parser.add_argument("--html", type=Path, help="write an HTML report with plots here")
    parser.add_argument(
        "--markdown", type=Path, help="write pass@1 per template and entity split at every step here (markdown)"
    )
    parser.add_argument(
        "--rule-baseline",
        type=Path,
        help="JSON of `python -m skyrl_integrations.analysis.rule_baseline --json`, shown beside --markdown's table",
    )
    parser.add_argument(
        "--success-threshold",
        type=float,
        default=None,
        help="count a trajectory as a success when its return (summed per-token rewards) is above this; default: "
        "the env's success metric if dumped, else final reward > 0 (as the trainer's pass_at_n)",
    )
    parser.add_argument(
        "--group-by",
        choices=("data_source", "env_class"),
        default="data_source",
        help="what an 'environment' is (default data_source, the fork's env key)",
    )
    parser.add_argument("--examples", type=int, default=3, help="example snippets kept per category (default 3)")
    parser.add_argument("--endpoint-url", help="S3-compatible endpoint (default: $AWS_ENDPOINT_URL, else AWS)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rule_baseline is not None and args.markdown is None:
        print(
            "skyrl-analyze-evals: error: --rule-baseline is shown in --markdown's report; give --markdown",
            file=sys.stderr,
        )
        return 1
    baseline = None
    if args.rule_baseline is not None:
        try:
            baseline = json.loads(args.rule_baseline.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"skyrl-analyze-evals: error: --rule-baseline {args.rule_baseline}: {exc}", file=sys.stderr)
            return 1
    try:
        steps = load_eval_dumps(args.location, args.endpoint_url)
    except DumpError as exc:
        print(f"skyrl-analyze-evals: error: {exc}", file=sys.stderr)
        return 1
    if args.steps:
        unknown = [step for step in args.steps if step not in steps]
        if unknown:
            print(
                f"skyrl-analyze-evals: error: step(s) {', '.join(unknown)} not in {args.location} "
                f"(found: {', '.join(steps)})",
                file=sys.stderr,
            )
            return 1
        steps = {step: steps[step] for step in dict.fromkeys(args.steps)}
    summary = {"source": args.location, **analyze(steps, args.group_by, args.success_threshold, args.examples)}
    print(format_text(summary), end="")
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(summary, indent=1) + "\n")
    if args.html is not None:
        atomic_write_text(args.html, format_html(summary, f"Eval analysis: {args.location}"))
    if args.markdown is not None:
        table = success_by_split(steps, args.success_threshold)
        atomic_write_text(args.markdown, format_markdown(table, baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
