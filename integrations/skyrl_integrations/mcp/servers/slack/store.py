"""Offline backend of the Slack server: the seed workspace in an in-memory SQLite database.

Each server process loads its own copy at start-up, so ``post_message`` never touches shipped data and nothing
survives the process. Within one process, posts are visible to every later call from every client: a stdio client
(one process per client) sees only its own posts, but a client that keeps one session across episodes (as
``MCPToolGroup`` does) sees earlier episodes' posts. Tasks whose answer depends on the latest messages of a channel
should therefore not share a server with tasks that post there, or should check the posting call itself rather than
the channel's contents.

New messages get the timestamp one second after the newest message of the workspace, so a run is reproducible.
"""

from __future__ import annotations

import sqlite3
import threading

from .._common import ToolError, unknown_value_error
from .output import MAX_SEARCH_RESULTS, format_message
from .seed import AGENT_USER_ID, build_workspace

_SCHEMA = """
CREATE TABLE users (id TEXT PRIMARY KEY, name TEXT UNIQUE, real_name TEXT, title TEXT, tz TEXT, is_bot INTEGER);
CREATE TABLE channels (id TEXT PRIMARY KEY, name TEXT UNIQUE, topic TEXT, members INTEGER);
CREATE TABLE messages (
    channel TEXT NOT NULL REFERENCES channels(id), ts TEXT NOT NULL, user TEXT NOT NULL REFERENCES users(id),
    text TEXT NOT NULL, thread_ts TEXT, PRIMARY KEY (channel, ts)
);
CREATE INDEX messages_by_thread ON messages (channel, thread_ts);
"""


class OfflineSlack:
    """The Slack tools over a private SQLite copy of the seed workspace; safe to call from several threads."""

    def __init__(self) -> None:
        workspace = build_workspace()
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        with self._db:
            self._db.executescript(_SCHEMA)
            self._db.executemany(
                "INSERT INTO users VALUES (?, ?, ?, ?, ?, ?)",
                [(u.id, u.name, u.real_name, u.title, u.tz, u.is_bot) for u in workspace.users],
            )
            self._db.executemany(
                "INSERT INTO channels VALUES (?, ?, ?, ?)",
                [(c.id, c.name, c.topic, len(c.members)) for c in workspace.channels],
            )
            self._db.executemany(
                "INSERT INTO messages VALUES (?, ?, ?, ?, ?)",
                [(m.channel, m.ts, m.user, m.text, m.thread_ts) for m in workspace.messages],
            )

    def _query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def _channel(self, channel: str) -> sqlite3.Row:
        key = str(channel).strip().lstrip("#")
        rows = self._query("SELECT * FROM channels WHERE id = ? OR name = ? COLLATE NOCASE", (key.upper(), key))
        if not rows:
            raise unknown_value_error(
                "channel", channel, [row["name"] for row in self._query("SELECT name FROM channels")]
            )
        return rows[0]

    def _with_reply_counts(self, rows: list[sqlite3.Row]) -> list[dict]:
        if not rows:
            return []
        counts = dict(
            self._query(
                "SELECT thread_ts, COUNT(*) FROM messages WHERE channel = ? AND thread_ts IS NOT NULL "
                "GROUP BY thread_ts",
                (rows[0]["channel"],),
            )
        )
        return [format_message(row["ts"], row["user"], row["text"], reply_count=counts.get(row["ts"])) for row in rows]

    def list_channels(self) -> dict:
        rows = self._query("SELECT * FROM channels ORDER BY name")
        return {
            "channels": [
                {"id": row["id"], "name": row["name"], "topic": row["topic"], "members": row["members"]} for row in rows
            ]
        }

    def read_channel(self, channel: str, limit: int) -> dict:
        found = self._channel(channel)
        rows = self._query(
            "SELECT * FROM messages WHERE channel = ? AND thread_ts IS NULL ORDER BY ts DESC LIMIT ?",
            (found["id"], limit + 1),
        )
        return {
            "channel": found["name"],
            "messages": self._with_reply_counts(rows[:limit]),
            "has_more": len(rows) > limit,
        }

    def read_thread(self, channel: str, ts: str) -> dict:
        found = self._channel(channel)
        rows = self._query(
            "SELECT * FROM messages WHERE channel = ? AND (ts = ? OR thread_ts = ?) ORDER BY ts",
            (found["id"], ts, ts),
        )
        if not rows or rows[0]["ts"] != ts:
            raise ToolError(f"No message with ts {ts!r} in #{found['name']}; use a ts from read_channel")
        return {
            "channel": found["name"],
            "messages": [format_message(row["ts"], row["user"], row["text"]) for row in rows],
        }

    def search_messages(self, query: str, channel: str | None) -> dict:
        terms = query.split()
        where = " AND ".join("m.text LIKE ? ESCAPE '\\'" for _ in terms)
        params: list = [f"%{_escape_like(term)}%" for term in terms]
        if channel is not None:
            where += " AND m.channel = ?"
            params.append(self._channel(channel)["id"])
        rows = self._query(
            f"SELECT m.*, c.name AS channel_name FROM messages m JOIN channels c ON c.id = m.channel "
            f"WHERE {where} ORDER BY m.ts DESC",
            tuple(params),
        )
        matches = []
        for row in rows[:MAX_SEARCH_RESULTS]:
            match = {"channel": row["channel_name"], **format_message(row["ts"], row["user"], row["text"])}
            if row["thread_ts"] is not None:
                match["thread_ts"] = row["thread_ts"]
            matches.append(match)
        return {"query": query, "total": len(rows), "matches": matches}

    def post_message(self, channel: str, text: str, thread_ts: str | None) -> dict:
        found = self._channel(channel)
        if thread_ts is not None and not self._query(
            "SELECT 1 FROM messages WHERE channel = ? AND ts = ? AND thread_ts IS NULL", (found["id"], thread_ts)
        ):
            raise ToolError(f"No top-level message with ts {thread_ts!r} in #{found['name']} to reply to")
        with self._lock, self._db:
            newest = self._db.execute("SELECT MAX(CAST(ts AS INTEGER)), COUNT(*) FROM messages").fetchone()
            ts = f"{newest[0] + 1}.{newest[1]:06d}"
            self._db.execute(
                "INSERT INTO messages VALUES (?, ?, ?, ?, ?)", (found["id"], ts, AGENT_USER_ID, text, thread_ts)
            )
        result = {"ok": True, "channel": found["name"], "ts": ts}
        if thread_ts is not None:
            result["thread_ts"] = thread_ts
        return result

    def get_user(self, user: str) -> dict:
        key = str(user).strip().lstrip("@")
        rows = self._query(
            "SELECT * FROM users WHERE id = ? OR name = ? COLLATE NOCASE OR real_name = ? COLLATE NOCASE",
            (key.upper(), key, key),
        )
        if not rows:
            raise unknown_value_error("user", user, [row["name"] for row in self._query("SELECT name FROM users")])
        row = rows[0]
        return {
            "id": row["id"],
            "name": row["name"],
            "real_name": row["real_name"],
            "title": row["title"],
            "tz": row["tz"],
            "is_bot": bool(row["is_bot"]),
        }


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
