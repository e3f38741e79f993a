"""The message shape both Slack backends return, so offline and live answers look the same to the model."""

from __future__ import annotations

import datetime as dt

MAX_SEARCH_RESULTS = 20


def format_time(ts: str) -> str:
    """Slack's ``"1717415580.000002"`` as ``"2024-06-03 11:53 UTC"`` (models read dates, not epochs)."""
    seconds = int(str(ts).split(".", 1)[0])
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def format_message(ts: str, user: str, text: str, reply_count: int | None = None) -> dict:
    message = {"ts": ts, "time": format_time(ts), "user": user, "text": text}
    if reply_count:
        message["reply_count"] = reply_count
    return message
