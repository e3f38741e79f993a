import hashlib
import sqlite3
import time

import pytest

from skyrl_gym.tools.sql import SQLCodeExecutorToolGroup, SQLExecutionError, SQLTimeoutError, run_query

FOREVER = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


@pytest.fixture
def db_root(tmp_path):
    (tmp_path / "shop").mkdir()
    conn = sqlite3.connect(tmp_path / "shop" / "shop.sqlite")
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price INTEGER)")
    conn.executemany("INSERT INTO items VALUES (?, ?, ?)", [(i, f"item{i}", i * 10) for i in range(1, 121)])
    conn.commit()
    conn.close()
    return tmp_path


@pytest.fixture
def tools(db_root):
    return SQLCodeExecutorToolGroup(db_root, timeout=1.0)


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def body(observation):
    """The observation text without the <observation> wrapper and the reminder."""
    assert observation.startswith("<observation>")
    return observation[len("<observation>") :].split("\n<reminder>")[0]


def test_select_renders_a_table_with_reminder(tools):
    out = tools.execute_tool("sql", "shop", "SELECT name, price FROM items WHERE id <= 2", 3)
    assert out == (
        "<observation>name | price\n------------\nitem1 | 10\nitem2 | 20\n"
        "<reminder>You have 3 turns left to complete the task.</reminder></observation>"
    )


def test_tool_group_name_and_tools(tools):
    assert tools.get_name() == "SQLCodeExecutorToolGroup"
    assert tools.get_tool_names() == ["sql"]


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO items VALUES (999, 'x', 1)",
        "UPDATE items SET price = 0",
        "DELETE FROM items",
        "DROP TABLE items",
        "CREATE TABLE t (a)",
        "PRAGMA query_only = OFF",
        "COMMIT",
    ],
)
def test_writes_are_refused_and_file_unchanged(tools, db_root, statement):
    db_file = db_root / "shop" / "shop.sqlite"
    before = digest(db_file)
    out = body(tools.execute_tool("sql", "shop", statement, 2))
    assert out.startswith("Error executing SQL: ")
    assert digest(db_file) == before
    assert run_query(db_file, "SELECT count(*), sum(price) FROM items").rows == [(120, 72600)]


def test_attach_is_refused_and_creates_no_file(tools, db_root):
    target = db_root / "other.sqlite"
    out = body(tools.execute_tool("sql", "shop", f"ATTACH DATABASE '{target}' AS other", 2))
    assert out == "Error executing SQL: ATTACH is not allowed: the database is read-only"
    assert not target.exists()


def test_vacuum_into_is_refused(tools, db_root):
    target = db_root / "copy.sqlite"
    out = body(tools.execute_tool("sql", "shop", f"VACUUM INTO '{target}'", 2))
    assert out.startswith("Error executing SQL: ")
    assert not target.exists()


def test_query_runs_in_a_transaction_that_is_rolled_back(db_root):
    db_file = db_root / "shop" / "shop.sqlite"
    run_query(db_file, "SELECT 1")
    conn = sqlite3.connect(db_file)
    assert conn.in_transaction is False
    conn.execute("BEGIN IMMEDIATE")  # would fail with 'database is locked' if a read transaction were left open
    conn.rollback()
    conn.close()


def test_timeout_interrupts_a_query_that_runs_forever(tools):
    start = time.monotonic()
    out = body(tools.execute_tool("sql", "shop", FOREVER, 2))
    elapsed = time.monotonic() - start
    assert out == "Error executing SQL: the query timed out after 1 s"
    assert elapsed < 2.0


def test_timeout_argument_overrides_the_default(tools):
    start = time.monotonic()
    out = body(tools.execute_tool("sql", "shop", FOREVER, 2, 0.3))
    assert out == "Error executing SQL: the query timed out after 0.3 s"
    assert time.monotonic() - start < 1.3


def test_run_query_raises_timeout_error(db_root):
    with pytest.raises(SQLTimeoutError):
        run_query(db_root / "shop" / "shop.sqlite", FOREVER, timeout=0.2)


def test_row_truncation_marker(tools):
    out = body(tools.execute_tool("sql", "shop", "SELECT id FROM items", 2))
    lines = out.split("\n")
    assert lines[2:4] == ["1", "2"]
    assert lines[-2] == "50"
    assert lines[-1] == "[truncated: showing the first 50 of 120 rows]"


def test_char_truncation_marker(db_root):
    tools = SQLCodeExecutorToolGroup(db_root, max_rows=1000, max_chars=100)
    out = body(tools.execute_tool("sql", "shop", "SELECT name, price FROM items", 2))
    table, marker = out.rsplit("\n", 1)
    assert len(table) == 100  # header 12 + dashes 12 + 120 rows (1464 chars) + 121 newlines = 1609
    assert marker == "[truncated: output cut to the first 100 of 1609 characters]"


def test_bad_sql_returns_error_text(tools):
    assert body(tools.execute_tool("sql", "shop", "SELECT nope FROM items", 1)) == (
        "Error executing SQL: no such column: nope"
    )
    assert body(tools.execute_tool("sql", "shop", "SELEC 1", 1)) == 'Error executing SQL: near "SELEC": syntax error'


def test_two_statements_are_refused(tools):
    out = body(tools.execute_tool("sql", "shop", "SELECT 1; DROP TABLE items", 1))
    assert out == "Error executing SQL: You can only execute one statement at a time."


@pytest.mark.parametrize("sql", [None, "", "   "])
def test_missing_sql_is_an_invalid_action(tools, sql):
    assert body(tools.execute_tool("sql", "shop", sql, 4)).startswith("Your previous action is invalid")


def test_unknown_database(tools):
    assert body(tools.execute_tool("sql", "nowhere", "SELECT 1", 1)) == (
        "Error executing SQL: database file not found: nowhere.sqlite"
    )


def test_path_traversal_in_db_id_is_refused(tools):
    assert (
        body(tools.execute_tool("sql", "../shop", "SELECT 1", 1))
        == "Error executing SQL: invalid database id '../shop'"
    )


def test_empty_result(tools):
    assert body(tools.execute_tool("sql", "shop", "SELECT id FROM items WHERE id < 0", 1)) == "id\n--\n(no rows)"


def test_null_and_blob_cells(tools):
    assert (
        body(tools.execute_tool("sql", "shop", "SELECT NULL AS a, x'00ff' AS b", 1)) == "a | b\n-----\nNULL | x'00ff'"
    )


def test_run_query_keeps_all_rows_by_default(db_root):
    result = run_query(db_root / "shop" / "shop.sqlite", "SELECT id FROM items")
    assert len(result.rows) == 120
    assert result.total_rows == 120
    assert result.truncated is False


def test_run_query_error(db_root):
    with pytest.raises(SQLExecutionError, match="no such table: nope"):
        run_query(db_root / "shop" / "shop.sqlite", "SELECT * FROM nope")
