"""`SQLEnv` (id `text2sql`): multi-turn text-to-SQL over a read-only SQLite database.

Each turn the model either runs an exploratory query with `<sql>...</sql>` (the result comes back as
an observation) or finishes with `<solution>...</solution>`. When an action holds both, the solution
wins. The episode ends on a solution or after `max_turns` turns, and only the final turn is rewarded:

- -1 when the final action holds no complete, non-empty `<solution>...</solution>` block;
- 1 when the solution's result equals the gold SQL's result, compared as *sets of rows* (row order
  and duplicate rows are ignored, column names are not compared);
- 0 otherwise (wrong rows, or the solution fails or times out).

An earlier action cannot hold a solution (it would have ended the episode), so scoring the final
action equals upstream's scoring of the concatenated history, without being fooled by tags that
appear in the prompt or in query results. Tags must be closed: configure `</sql>` and `</solution>`
as stop strings that are kept in the output.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from skyrl_gym.common.config import keys_of
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.utils import required_extra
from skyrl_gym.tools.sql import SQLCodeExecutorToolGroup, SQLExecutionError, resolve_db_file, run_query

DEFAULT_MAX_TURNS = 5
DATA_SUBDIRS = {
    "synsql": "SynSQL-2.5M/databases",
    "spider": "spider/database",
    "bird": "bird/train/train_databases",
}
"""`extras["data"]` -> where that dataset's databases live under `db_path`."""

_SQL = re.compile(r"<sql>(.*?)</sql>", re.DOTALL)
_SOLUTION = re.compile(r"<solution>(.*?)</solution>", re.DOTALL)


@dataclasses.dataclass
class Text2SQLEnvConfig:
    db_path: str = "/home/ray/default/sql_data"


def _db_path(env_config: Any) -> str:
    if env_config is None:
        return Text2SQLEnvConfig().db_path
    if isinstance(env_config, Mapping):
        return env_config.get("db_path") or Text2SQLEnvConfig().db_path
    return env_config.db_path


def _last_block(pattern: re.Pattern, text: str) -> str | None:
    """The stripped content of the last `pattern` block in `text`, or None if absent or empty."""
    blocks = [b.strip() for b in pattern.findall(text or "")]
    return blocks[-1] if blocks and blocks[-1] else None


def results_match(db_file: str | Path, predicted_sql: str, gold_sql: str, timeout: float = 5.0) -> bool:
    """True when both queries run and return the same set of rows. A failing gold query raises."""
    gold = run_query(db_file, gold_sql, timeout)
    try:
        predicted = run_query(db_file, predicted_sql, timeout)
    except SQLExecutionError:
        return False
    return set(predicted.rows) == set(gold.rows)


class SQLEnv(BaseTextEnv):
    env_config_keys: ClassVar[frozenset[str]] = keys_of(Text2SQLEnvConfig)

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        self.db_id = required_extra(extras, "db_id")
        self.gold_sql = required_extra(extras, "reward_spec", "ground_truth")
        data = required_extra(extras, "data")
        if data not in DATA_SUBDIRS:
            raise ValueError(f"extras['data'] must be one of {sorted(DATA_SUBDIRS)}, got {data!r}")
        self.max_turns = int((extras or {}).get("max_turns") or DEFAULT_MAX_TURNS)
        self.db_root = Path(_db_path(env_config)) / DATA_SUBDIRS[data]
        self.sql_tools = SQLCodeExecutorToolGroup(db_file_path=self.db_root)
        self.init_tool_groups([self.sql_tools])

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        solution = _last_block(_SOLUTION, action)
        if solution is not None or self.turns >= self.max_turns:
            return self._finish(solution)
        query = _last_block(_SQL, action)
        observation = self._execute_tool(
            self.sql_tools.get_name(), "sql", [self.db_id, query, self.max_turns - self.turns]
        )
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": observation}],
            reward=0.0,
            done=False,
            metadata={"sql": query},
        )

    def _finish(self, solution: str | None) -> BaseTextEnvStepOutput:
        metadata: dict[str, Any] = {"solution": solution}
        if solution is None:
            reward = -1.0
        else:
            db_file = resolve_db_file(self.db_root, self.db_id)
            try:
                reward = 1.0 if results_match(db_file, solution, self.gold_sql, self.sql_tools.timeout) else 0.0
            except SQLExecutionError as exc:
                reward, metadata["gold_error"] = 0.0, str(exc)
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=metadata)
