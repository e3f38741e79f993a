"""Find and read eval dumps: local folders or S3, written by this fork or by upstream SkyRL.

Layouts understood (a "step folder" holds one `<data_source>.jsonl` per data source):

- an export folder `<export_path>/` with `dumped_evals/` inside;
- `dumped_evals/` itself, with step folders `global_step_<N>_evals/`, `eval_only/` and `base_evals/` (label ``base``:
  the model before a warm start, `trainer.warm_start`, evaluated before the warm start's step 0 eval);
- the S3 layout `s3://<bucket>/evals/<run>/`, with step folders `global_step_<N>/` and `eval_only/`;
- a single step folder (any name; `global_step_<N>[_evals]` gives its step).

`aggregated_results.jsonl` holds metrics, not trajectories, and is skipped. Rows need upstream's `input_prompt`,
`output_response` and `score`; every other field is optional (upstream dumps have fewer fields than ours).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_gym import InfraFailure
from skyrl_gym.common.outcomes import trajectory_return, trajectory_solved
from skyrl_integrations.extras import missing_extra

METRICS_FILE = "aggregated_results.jsonl"
REQUIRED_FIELDS = ("input_prompt", "output_response", "score")
_STEP_FOLDER = re.compile(r"^(?:global_step_(\d+)(?:_evals)?|(eval_only)|(base)_evals)$")
BASE_LABEL = "base"
"""The step label of `base_evals/`, ordered before every step."""

# Chat-template turn markers, for dumps without `messages`: the role after a start marker opens a message.
_TEMPLATES = (
    (re.compile(r"<\|im_start\|>(\w+)\n"), "<|im_end|>"),  # ChatML (SmolLM2, Qwen)
    (re.compile(r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n*"), "<|eot_id|>"),  # Llama 3
)


class DumpError(ValueError):
    """A dump that cannot be read; the message names the file, line or key at fault."""


@dataclass
class DumpedTrajectory:
    """One dumped trajectory, normalised. `None` means the dump does not say (never a guessed value)."""

    location: str
    """`<file>:<line>` it came from."""
    data_source: str | None
    env_class: str | None
    prompt_key: str
    """Groups the samples of one prompt: the trajectory id's instance id, else the prompt text."""
    trajectory_id: str | None
    score: float
    """The trajectory's return: its reward, or the sum of its per-token rewards."""
    solved: bool
    """`skyrl_gym.common.outcomes.trajectory_solved`: the env's `success` metric if dumped, else final reward > 0 (the
    same definition as the trainer's `pass_at_n`)."""
    stop_reason: str | None
    response: list[dict[str, Any]] | None
    """Messages after the prompt (assistant turns and observations): from the dump's `messages`, else split from
    `output_response` at known chat-template markers; None when neither works."""
    output_response: str
    num_turns: int | None
    tool_calls: int | None
    parse_failures: int | None
    env_metrics: dict[str, Any] = field(default_factory=dict)
    infra_failure: InfraFailure | None = None
    """The infrastructure failure the trajectory ended in, from the dump's `infra_failure` (`InfraFailure.to_json`)."""
    extra_info: dict[str, Any] = field(default_factory=dict)
    """The dataset row's `extra_info` (from the dump's `env_extras`), e.g. the rule-based generator's `template` and
    `entity_split`; empty when the dump does not carry it."""

    def succeeded(self, success_threshold: float | None = None) -> bool:
        """`solved`, or with a threshold, whether the return is above it (`--success-threshold`)."""
        return self.solved if success_threshold is None else self.score > success_threshold

    def group(self, group_by: str) -> str:
        """Its environment under `group_by` ("data_source" or "env_class"), "unknown" when missing."""
        value = self.data_source if group_by == "data_source" else self.env_class
        return "unknown" if value is None else str(value)


def load_eval_dumps(location: str, endpoint_url: str | None = None) -> dict[str, list[DumpedTrajectory]]:
    """Step label ("base", "0", "40", "eval_only", or a folder name) -> its trajectories, for a local path or `s3://`
    URI."""
    store = _S3Store(location, endpoint_url) if location.startswith("s3://") else _LocalStore(location)
    steps = _step_files(store.list_files(), store.name)
    if not steps:
        raise DumpError(
            f"no eval dump files (*.jsonl besides {METRICS_FILE}) under {location}; expected an export folder, "
            "dumped_evals/, evals/<run>/ (S3) or a folder of <data_source>.jsonl files"
        )
    return {step: read_trajectories((store.describe(f), store.read_text(f)) for f in files) for step, files in steps}


def read_trajectories(files: Iterable[tuple[str, str]]) -> list[DumpedTrajectory]:
    """Trajectories of (location, JSONL text) files. Step-wise dumps keep each trajectory's last step only:
    rows with `is_last_step` false are dropped, and of rows sharing a `trajectory_id` in a file the last wins."""
    trajectories = []
    for location, text in files:
        by_id: dict[str, DumpedTrajectory] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            row = _parse_line(line, f"{location}:{number}")
            if row.get("is_last_step") is False:
                continue
            trajectory = to_trajectory(row, f"{location}:{number}")
            if trajectory.trajectory_id is None:
                trajectories.append(trajectory)
            else:
                by_id.pop(trajectory.trajectory_id, None)
                by_id[trajectory.trajectory_id] = trajectory
        trajectories.extend(by_id.values())
    return trajectories


def to_trajectory(row: Mapping[str, Any], location: str) -> DumpedTrajectory:
    """Normalise one dump row; raises `DumpError` naming `location` and the key at fault."""
    missing = [key for key in REQUIRED_FIELDS if key not in row]
    if missing:
        raise DumpError(f"{location}: missing key(s) {', '.join(missing)}")
    trajectory_id = row.get("trajectory_id")
    instance = None
    if trajectory_id is not None:
        if not isinstance(trajectory_id, Mapping) or "instance_id" not in trajectory_id:
            raise DumpError(f"{location}: 'trajectory_id' must be an object with 'instance_id' and 'repetition_id'")
        instance = str(trajectory_id["instance_id"])
        trajectory_id = f"{instance}_{trajectory_id.get('repetition_id')}"
    env_metrics = _optional(row, "env_metrics", dict, location) or {}
    response = _response_messages(row, location)
    num_turns = _optional(row, "num_turns", int, location)
    if num_turns is None and response is not None:
        num_turns = sum(message["role"] == "assistant" for message in response)
    return DumpedTrajectory(
        location=location,
        data_source=_optional(row, "data_source", str, location),
        env_class=_optional(row, "env_class", str, location),
        prompt_key=instance if instance is not None else str(row["input_prompt"]),
        trajectory_id=trajectory_id,
        score=trajectory_return(_score(row["score"], location)),
        solved=trajectory_solved(row["score"], env_metrics),
        stop_reason=_optional(row, "stop_reason", str, location),
        response=response,
        output_response=str(row["output_response"]),
        num_turns=num_turns,
        tool_calls=_optional(row, "tool_calls", int, location),
        parse_failures=_parse_failures(row.get("parse_failures"), location),
        env_metrics=env_metrics,
        infra_failure=_infra_failure(row.get("infra_failure"), location),
        extra_info=_extra_info(row.get("env_extras"), location),
    )


# ------------------------------------------------------------------------------------------------ fields


def _parse_line(line: str, location: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DumpError(f"{location}: not valid JSON ({exc})") from exc
    if not isinstance(row, dict):
        raise DumpError(f"{location}: a row must be a JSON object, got {type(row).__name__}")
    return row


def _extra_info(env_extras: Any, location: str) -> dict[str, Any]:
    if env_extras is None:
        return {}
    if not isinstance(env_extras, Mapping):
        raise DumpError(f"{location}: 'env_extras' must be an object or null, got {env_extras!r}")
    info = env_extras.get("extra_info")
    if info is not None and not isinstance(info, Mapping):
        raise DumpError(f"{location}: 'env_extras.extra_info' must be an object or null, got {info!r}")
    return dict(info or {})


def _infra_failure(value: Any, location: str) -> InfraFailure | None:
    if value is None:
        return None
    try:
        return InfraFailure.from_json(value, f"{location}: infra_failure")
    except ValueError as exc:
        raise DumpError(str(exc)) from exc


def _optional(row: Mapping[str, Any], key: str, kind: type, location: str) -> Any:
    value = row.get(key)
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    raise DumpError(f"{location}: '{key}' must be {kind.__name__} or null, got {value!r}")


def _score(value: Any, location: str) -> float | list[float]:
    numbers = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
        raise DumpError(f"{location}: 'score' must be a number or a list of numbers, got {value!r}")
    return value


def _parse_failures(value: Any, location: str) -> int | None:
    """Total parse failures: an int, or the sum of a `{kind: count}` object."""
    if value is None:
        return None
    counts = list(value.values()) if isinstance(value, dict) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in counts):
        raise DumpError(f"{location}: 'parse_failures' must be an int or an object of ints, got {value!r}")
    return sum(counts)


def _response_messages(row: Mapping[str, Any], location: str) -> list[dict[str, Any]] | None:
    messages = row.get("messages")
    if messages is not None:
        start = row.get("num_prompt_messages")
        if not isinstance(messages, list) or not isinstance(start, int):
            raise DumpError(f"{location}: 'messages' must be a list and comes with an int 'num_prompt_messages'")
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise DumpError(f"{location}: every entry of 'messages' must be an object with a string 'role'")
        return [{"role": m["role"], "content": _text(m.get("content"))} for m in messages[start:]]
    return split_response(str(row["input_prompt"]), str(row["output_response"]))


def _text(content: Any) -> str:
    """Message content as text (content-part lists are joined; anything else is JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return json.dumps(content)


def split_response(input_prompt: str, output_response: str) -> list[dict[str, str]] | None:
    """The messages of a decoded response, when the prompt shows a known chat template (ChatML, Llama 3).

    The response starts inside the assistant turn the prompt opened; each start marker opens a new message.
    Returns None for an unknown template (then turns and observations are unknown).
    """
    for start, end in _TEMPLATES:
        if not start.search(input_prompt):
            continue
        pieces = start.split(output_response)
        # split() with one group: [text, role, text, role, text, ...]
        messages = [{"role": "assistant", "content": pieces[0]}]
        messages += [{"role": role, "content": text} for role, text in zip(pieces[1::2], pieces[2::2], strict=True)]
        for message in messages:
            message["content"] = message["content"].split(end)[0].strip()
        return messages
    return None


# ----------------------------------------------------------------------------------------------- layout


def _step_label(folder_name: str) -> str | None:
    match = _STEP_FOLDER.match(folder_name)
    if match is None:
        return None
    return next(group for group in match.groups() if group is not None)


def _step_files(paths: list[str], root_name: str) -> list[tuple[str, list[str]]]:
    """(step label, its dump files) sorted by step (numbers first), from the relative paths below the root."""
    base = "dumped_evals/" if any(path.startswith("dumped_evals/") for path in paths) else ""
    dumps = [
        path
        for path in paths
        if path.startswith(base) and path.endswith(".jsonl") and path.rsplit("/", 1)[-1] != METRICS_FILE
    ]
    steps: dict[str, list[str]] = {}
    folders: dict[str, str] = {}
    for path in dumps:
        folder = path.removeprefix(base).rpartition("/")[0]
        label = _step_label(folder)
        if label is None:
            continue
        if folders.setdefault(label, folder) != folder:
            raise DumpError(f"step {label} has two folders: {folders[label]}/ and {folder}/")
        steps.setdefault(label, []).append(path)
    if not steps:
        top_level = [path for path in dumps if "/" not in path.removeprefix(base)]
        if top_level:
            steps[_step_label(root_name) or root_name] = top_level
    return sorted(((label, sorted(files)) for label, files in steps.items()), key=lambda item: _step_order(item[0]))


def _step_order(label: str) -> tuple[int, int, str]:
    if label == BASE_LABEL:
        return (-1, 0, "")
    return (0, int(label), "") if label.isdigit() else (1, 0, label)


class _LocalStore:
    def __init__(self, location: str):
        self.root = Path(location).expanduser()
        if not self.root.is_dir():
            raise DumpError(f"{location} is not a folder")
        self.name = self.root.resolve().name

    def list_files(self) -> list[str]:
        return sorted(path.relative_to(self.root).as_posix() for path in self.root.rglob("*.jsonl") if path.is_file())

    def describe(self, path: str) -> str:
        return str(self.root / path)

    def read_text(self, path: str) -> str:
        return (self.root / path).read_text()


class _S3Store:
    """A prefix in an S3-compatible bucket; the endpoint comes from `endpoint_url` or `AWS_ENDPOINT_URL`."""

    def __init__(self, uri: str, endpoint_url: str | None):
        try:
            import boto3  # only S3 users need it
        except ModuleNotFoundError as exc:
            raise missing_extra(exc, "analysis", "reading dumps from S3") from exc

        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise DumpError(f"{uri}: expected s3://<bucket>/<prefix>")
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.name = self.prefix.rsplit("/", 1)[-1] or bucket
        self.client = boto3.client("s3", endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL"))

    def list_files(self) -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        paginator = self.client.get_paginator("list_objects_v2")
        with self._errors(self.describe("")):
            keys = [
                item["Key"]
                for page in paginator.paginate(Bucket=self.bucket, Prefix=base)
                for item in page.get("Contents", [])
            ]
        return sorted(key.removeprefix(base) for key in keys)

    def describe(self, path: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}/{path}" if self.prefix else f"s3://{self.bucket}/{path}"

    def read_text(self, path: str) -> str:
        key = f"{self.prefix}/{path}" if self.prefix else path
        with self._errors(self.describe(path)):
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode()

    @staticmethod
    @contextlib.contextmanager
    def _errors(location: str):
        """botocore errors (no credentials, no bucket, endpoint down) as a `DumpError` naming the location."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (BotoCoreError, ClientError) as exc:
            raise DumpError(f"{location}: {exc}") from exc


def step_title(label: str) -> str:
    """How a report names step ``label``: ``step 9``, and ``base`` for the model before its warm start."""
    return label if label == BASE_LABEL else f"step {label}"
