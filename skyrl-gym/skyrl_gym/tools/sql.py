"""`SQLCodeExecutorToolGroup`: read-only SQLite queries for text-to-SQL agents.

Queries written by a model are untrusted, so every query runs with several independent guards:

- the database is opened read-only (`mode=ro` URI) and `PRAGMA query_only` is set, so writes fail;
- ATTACH/DETACH, transaction control and changing `query_only` are refused by an authorizer;
- the query runs inside a transaction that is always rolled back;
- a progress handler aborts the query inside SQLite once the wall-clock budget is spent, so no
  thread is left running;
- at most `MAX_RESULT_ROWS` rows are ever held in memory, and strings/blobs are capped in size.

`run_query` is the single execution path: the tool renders its result as text, and the text2sql env
uses it to compare the predicted and the gold results.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from pathlib import Path
from typing import Any

from skyrl_gym.tools.core import ToolGroup, tool

MAX_RESULT_ROWS = 100_000
"""Hard cap on the rows a query may return when all rows are kept (reward comparison)."""
MAX_VALUE_BYTES = 10_000_000
"""SQLITE_LIMIT_LENGTH: the largest string or blob a query may build."""
_PROGRESS_INTERVAL = 1_000
"""SQLite VM instructions between two deadline checks."""

_DENIED_ACTIONS = {
    sqlite3.SQLITE_ATTACH: "ATTACH",
    sqlite3.SQLITE_DETACH: "DETACH",
    sqlite3.SQLITE_TRANSACTION: "transaction control",
    sqlite3.SQLITE_SAVEPOINT: "SAVEPOINT",
}
_DENIED_PRAGMAS = {"query_only", "writable_schema"}


class SQLExecutionError(Exception):
    """The query could not be run; the message is safe to show to the model."""


class SQLTimeoutError(SQLExecutionError):
    """The query exceeded its wall-clock budget and was interrupted."""


@dataclasses.dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]
    total_rows: int | None
    """Number of rows the query produced; None when counting beyond the kept rows hit the time limit."""

    @property
    def truncated(self) -> bool:
        return self.total_rows is None or self.total_rows > len(self.rows)


def resolve_db_file(db_root: str | Path, db_id: str) -> Path:
    """`<db_root>/<db_id>/<db_id>.sqlite`; `db_id` must be a plain name (no path separators, not `.`/`..`)."""
    if not isinstance(db_id, str) or db_id in {"", ".", ".."} or Path(db_id).name != db_id or "\\" in db_id:
        raise SQLExecutionError(f"invalid database id {db_id!r}")
    return Path(db_root) / db_id / f"{db_id}.sqlite"


def _connect_read_only(db_file: Path, timeout: float) -> sqlite3.Connection:
    if not db_file.is_file():
        raise SQLExecutionError(f"database file not found: {db_file.name}")
    uri = f"{db_file.resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=min(timeout, 5.0), check_same_thread=False)
    try:
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def run_query(db_file: str | Path, sql: str, timeout: float = 5.0, keep_rows: int | None = None) -> QueryResult:
    """Run one SQL statement read-only and return its rows.

    With `keep_rows=None` every row is kept (more than `MAX_RESULT_ROWS` raises); otherwise only the first
    `keep_rows` are kept and the rest are counted. Raises `SQLTimeoutError` past `timeout` seconds and
    `SQLExecutionError` for any other failure.
    """
    deadline = time.monotonic() + timeout
    timed_out = False
    denied: list[str] = []

    def authorizer(action: int, arg1: Any, arg2: Any, db_name: Any, trigger: Any) -> int:
        if action in _DENIED_ACTIONS:
            denied.append(_DENIED_ACTIONS[action])
        elif action == sqlite3.SQLITE_PRAGMA and str(arg1).lower() in _DENIED_PRAGMAS:
            denied.append(f"PRAGMA {arg1}")
        else:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    def past_deadline() -> int:
        nonlocal timed_out
        timed_out = time.monotonic() > deadline
        return int(timed_out)

    try:
        conn = _connect_read_only(Path(db_file), timeout)
    except sqlite3.Error as exc:
        raise SQLExecutionError(f"cannot open database {Path(db_file).name}: {exc}") from None
    try:
        conn.execute("BEGIN")
        conn.set_authorizer(authorizer)
        conn.set_progress_handler(past_deadline, _PROGRESS_INTERVAL)
        cursor = conn.execute(sql)
        columns = [d[0] for d in cursor.description or []]
        limit = MAX_RESULT_ROWS if keep_rows is None else keep_rows
        rows = cursor.fetchmany(limit + 1) if columns else []
        if len(rows) <= limit:
            return QueryResult(columns, rows, len(rows))
        if keep_rows is None:
            raise SQLExecutionError(f"the query returned more than {MAX_RESULT_ROWS} rows")
        total = len(rows)
        try:
            for _ in cursor:
                total += 1
        except sqlite3.OperationalError:
            if not timed_out:
                raise
            return QueryResult(columns, rows[:limit], None)
        return QueryResult(columns, rows[:limit], total)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
        if timed_out:
            raise SQLTimeoutError(f"the query timed out after {timeout:g} s") from None
        if denied:
            raise SQLExecutionError(f"{denied[0]} is not allowed: the database is read-only") from None
        raise SQLExecutionError(str(exc) or type(exc).__name__) from None
    finally:
        conn.set_progress_handler(None, 0)
        conn.set_authorizer(None)
        if conn.in_transaction:
            conn.rollback()
        conn.close()


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"x'{value[:32].hex()}{'...' if len(value) > 32 else ''}'"
    return str(value)


def render_result(result: QueryResult, max_rows: int, max_chars: int) -> str:
    """A pipe-separated text table, cut to `max_rows` rows and then to `max_chars` characters, with markers."""
    if not result.columns:
        return "The statement ran and returned no result set."
    lines = [" | ".join(result.columns), "-" * min(len(" | ".join(result.columns)), 80)]
    lines += [" | ".join(_cell(v) for v in row) for row in result.rows[:max_rows]]
    if not result.rows:
        lines.append("(no rows)")
    text = "\n".join(lines)
    notes = []
    if len(text) > max_chars:
        notes.append(f"[truncated: output cut to the first {max_chars} of {len(text)} characters]")
        text = text[:max_chars]
    shown = min(len(result.rows), max_rows)
    if result.total_rows is None:
        notes.append(f"[truncated: showing the first {shown} rows; more rows exist (counting hit the time limit)]")
    elif result.total_rows > shown:
        notes.append(f"[truncated: showing the first {shown} of {result.total_rows} rows]")
    return "\n".join([text, *notes])


INVALID_ACTION_MESSAGE = (
    "Your previous action is invalid: no SQL query was found. Think step by step, then either write one SQL "
    "query inside <sql>...</sql> or give your final query inside <solution>...</solution>, and try again."
)


class SQLCodeExecutorToolGroup(ToolGroup):
    """One tool, `sql`, over the databases `<db_file_path>/<db_id>/<db_id>.sqlite`."""

    def __init__(self, db_file_path: str | Path, timeout: float = 5.0, max_rows: int = 50, max_chars: int = 9000):
        super().__init__(name="SQLCodeExecutorToolGroup")
        self.db_file_path = Path(db_file_path)
        self.timeout = timeout
        self.max_rows = max_rows
        self.max_chars = max_chars

    def execute(self, db_id: str, sql: str, timeout: float | None = None) -> str:
        """The query's result table as text, or `Error executing SQL: ...`; never raises."""
        try:
            db_file = resolve_db_file(self.db_file_path, db_id)
            result = run_query(db_file, sql, self.timeout if timeout is None else timeout, keep_rows=self.max_rows)
        except SQLExecutionError as exc:
            return f"Error executing SQL: {exc}"
        return render_result(result, self.max_rows, self.max_chars)

    @tool
    def sql(self, db_id: str, sql: str | None, turns_left: int, timeout: float | None = None) -> str:
        """Run `sql` on database `db_id`; the observation ends with a reminder of the turns left."""
        body = INVALID_ACTION_MESSAGE if sql is None or not sql.strip() else self.execute(db_id, sql, timeout)
        reminder = f"<reminder>You have {turns_left} turns left to complete the task.</reminder>"
        return f"<observation>{body}\n{reminder}</observation>"
