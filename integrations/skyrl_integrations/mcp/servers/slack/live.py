"""Live backend of the Slack server: the Slack Web API.

``--mode live`` with ``SLACK_BOT_TOKEN`` in the environment or ``.env``; ``SLACK_BASE_URL`` (default
``https://slack.com/api``) points it at another server speaking the same wire format (the tests run one locally).
Methods used: ``conversations.list``, ``conversations.history``, ``conversations.replies``, ``search.messages``,
``chat.postMessage``, ``users.info`` and ``users.list`` (to find a user by name).

Slack reports failures as HTTP 200 with ``{"ok": false, "error": "<code>"}`` and rate limits as HTTP 429 with a
``Retry-After`` header (seconds). :class:`SlackWebClient`, a thin layer over ``_common.LiveAPI``, waits and retries a
rate-limited call (a few times, for short waits), turns an ``ok: false`` answer into a ``ToolError`` naming the method
and Slack's error code (with a hint), and leaves HTTP and network failures to ``LiveAPI``'s messages. The token
travels only in the ``Authorization`` header and is scrubbed from every message. Note that Slack's
``search.messages`` accepts only user tokens (``xoxp-``); with a bot token it answers ``not_allowed_token_type``,
which the search tool reports as such.
"""

from __future__ import annotations

import re
import threading
from typing import Any
from urllib.parse import parse_qs, urlparse

from .._common import LiveAPI, RateLimitError, ToolError, api_key, require_api_key, unknown_value_error
from .output import MAX_SEARCH_RESULTS, format_message

DEFAULT_BASE_URL = "https://slack.com/api"
MAX_PAGES = 10  # of conversations.list / users.list, 200 entries each

_HINTS = {
    "invalid_auth": "the token was rejected; check SLACK_BOT_TOKEN",
    "not_authed": "no token reached Slack; check SLACK_BOT_TOKEN",
    "token_revoked": "the token was revoked; check SLACK_BOT_TOKEN",
    "account_inactive": "the token's account is deactivated; check SLACK_BOT_TOKEN",
    "not_allowed_token_type": "this method needs another token type (search.messages needs a user token, xoxp-)",
    "channel_not_found": "no such channel, or the bot cannot see it; use list_channels",
    "not_in_channel": "the bot is not a member of this channel; invite it first",
    "thread_not_found": "no thread with that ts; use a ts from read_channel",
    "user_not_found": "no such user",
}
_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{8,}")
_USER_ID = re.compile(r"[UW][A-Z0-9]{6,}")
_JSON_UTF8 = {"Content-Type": "application/json; charset=utf-8"}  # without the charset Slack answers with a warning


class SlackWebClient:
    """Calls Slack Web API methods; returns the decoded body of ``ok`` answers and raises ``ToolError`` otherwise.

    HTTP, rate limiting (``max_retries``, ``max_retry_wait_s``) and token scrubbing are ``LiveAPI``'s; this layer
    adds Slack's own failure report, HTTP 200 with ``{"ok": false, "error": "<code>"}``.
    """

    def __init__(
        self,
        token: str,
        base_url: str = DEFAULT_BASE_URL,
        *,
        timeout_s: float = 20.0,
        max_retries: int = 2,
        max_retry_wait_s: float = 30.0,
    ) -> None:
        self._api = LiveAPI(
            "Slack",
            base_url,
            secrets=[token],
            headers={"Authorization": f"Bearer {token}"},
            timeout_s=timeout_s,
            max_retries=max_retries,
            max_retry_wait_s=max_retry_wait_s,
        )

    def call(self, method: str, params: dict[str, Any] | None = None, *, body: dict[str, Any] | None = None) -> dict:
        """GET ``method`` with query ``params``, or POST ``body`` as JSON (Slack's write methods take JSON)."""
        try:
            if body is None:
                payload = self._api.request("GET", f"/{method}", params=params)
            else:
                payload = self._api.request("POST", f"/{method}", json_body=body, headers=_JSON_UTF8)
        except RateLimitError as exc:
            raise ToolError(f"Slack API rate limit on {method}: retry after {exc.retry_after_s:g} s") from None
        if not isinstance(payload, dict) or payload.get("ok") is not True:
            raise ToolError(self._api.redact(_describe_error(method, payload)))
        return payload

    def close(self) -> None:
        self._api.close()


def _describe_error(method: str, payload: Any) -> str:
    if not isinstance(payload, dict) or not payload.get("error"):
        return f"Slack API error on {method}: the answer has neither ok=true nor an error code"
    code = str(payload["error"])
    hint = _HINTS.get(code)
    if code == "missing_scope":
        hint = f"the token lacks the scope {payload.get('needed', '?')}"
    return f"Slack API error on {method}: {code}" + (f" ({hint})" if hint else "")


class LiveSlack:
    """The Slack tools over the real API. Channel names are resolved through ``conversations.list`` (cached)."""

    def __init__(self, client: SlackWebClient) -> None:
        self._client = client
        self._channels: list[dict] | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> LiveSlack:
        """Raises ``LiveModeError`` when no ``SLACK_BOT_TOKEN`` is configured."""
        token = require_api_key("SLACK_BOT_TOKEN", "slack")
        return cls(SlackWebClient(token, api_key("SLACK_BASE_URL") or DEFAULT_BASE_URL))

    def _paginate(self, method: str, key: str, params: dict[str, Any]) -> list[dict]:
        items: list[dict] = []
        cursor = ""
        for _ in range(MAX_PAGES):
            payload = self._client.call(method, {**params, "limit": 200, **({"cursor": cursor} if cursor else {})})
            items.extend(payload.get(key, []))
            cursor = (payload.get("response_metadata") or {}).get("next_cursor", "")
            if not cursor:
                break
        return items

    def _all_channels(self, refresh: bool = False) -> list[dict]:
        with self._lock:
            if self._channels is None or refresh:
                self._channels = self._paginate(
                    "conversations.list",
                    "channels",
                    {"types": "public_channel,private_channel", "exclude_archived": "true"},
                )
            return self._channels

    def _channel(self, channel: str) -> tuple[str, str]:
        """``(id, name)`` of a channel given as a name, ``#name`` or id."""
        key = str(channel).strip().lstrip("#")
        for refresh in (False, True):
            for found in self._all_channels(refresh):
                if found["id"] == key or found["name"].lower() == key.lower():
                    return found["id"], found["name"]
        if _CHANNEL_ID.fullmatch(key):  # e.g. a direct-message conversation, which conversations.list leaves out
            return key, key
        raise unknown_value_error("channel", channel, [found["name"] for found in self._all_channels()])

    def list_channels(self) -> dict:
        channels = sorted(self._all_channels(refresh=True), key=lambda found: found["name"])
        return {
            "channels": [
                {
                    "id": found["id"],
                    "name": found["name"],
                    "topic": (found.get("topic") or {}).get("value", ""),
                    "members": found.get("num_members"),
                }
                for found in channels
            ]
        }

    def read_channel(self, channel: str, limit: int) -> dict:
        channel_id, name = self._channel(channel)
        payload = self._client.call("conversations.history", {"channel": channel_id, "limit": limit})
        messages = [_message(raw, raw.get("reply_count")) for raw in payload.get("messages", [])[:limit]]
        return {"channel": name, "messages": messages, "has_more": bool(payload.get("has_more"))}

    def read_thread(self, channel: str, ts: str) -> dict:
        channel_id, name = self._channel(channel)
        payload = self._client.call("conversations.replies", {"channel": channel_id, "ts": ts})
        return {"channel": name, "messages": [_message(raw) for raw in payload.get("messages", [])]}

    def search_messages(self, query: str, channel: str | None) -> dict:
        full_query = query if channel is None else f"{query} in:#{self._channel(channel)[1]}"
        payload = self._client.call(
            "search.messages",
            {"query": full_query, "count": MAX_SEARCH_RESULTS, "sort": "timestamp", "sort_dir": "desc"},
        )
        found = payload.get("messages") or {}
        matches = []
        for raw in found.get("matches", []):
            match = {"channel": (raw.get("channel") or {}).get("name", ""), **_message(raw)}
            thread_ts = parse_qs(urlparse(raw.get("permalink", "")).query).get("thread_ts")
            if thread_ts and thread_ts[0] != raw.get("ts"):
                match["thread_ts"] = thread_ts[0]
            matches.append(match)
        return {"query": query, "total": found.get("total", len(matches)), "matches": matches}

    def post_message(self, channel: str, text: str, thread_ts: str | None) -> dict:
        channel_id, name = self._channel(channel)
        body = {"channel": channel_id, "text": text, **({"thread_ts": thread_ts} if thread_ts else {})}
        payload = self._client.call("chat.postMessage", body=body)
        result = {"ok": True, "channel": name, "ts": payload.get("ts", "")}
        if thread_ts is not None:
            result["thread_ts"] = thread_ts
        return result

    def get_user(self, user: str) -> dict:
        key = str(user).strip().lstrip("@")
        if _USER_ID.fullmatch(key):
            return _user(self._client.call("users.info", {"user": key})["user"])
        members = self._paginate("users.list", "members", {})
        for member in members:
            profile = member.get("profile") or {}
            names = (member.get("name"), member.get("real_name"), profile.get("display_name"), profile.get("real_name"))
            if key.lower() in {str(name).lower() for name in names if name}:
                return _user(member)
        raise unknown_value_error("user", user, [str(member.get("name")) for member in members])


def _message(raw: dict, reply_count: int | None = None) -> dict:
    author = raw.get("user") or raw.get("bot_id") or raw.get("username") or ""
    return format_message(str(raw.get("ts", "0")), author, raw.get("text", ""), reply_count=reply_count)


def _user(raw: dict) -> dict:
    profile = raw.get("profile") or {}
    return {
        "id": raw.get("id"),
        "name": raw.get("name"),
        "real_name": raw.get("real_name") or profile.get("real_name", ""),
        "title": profile.get("title", ""),
        "tz": raw.get("tz", ""),
        "is_bot": bool(raw.get("is_bot")),
    }
