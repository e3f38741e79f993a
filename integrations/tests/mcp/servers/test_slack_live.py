"""The Slack server's live mode against a local server speaking the Slack Web API's wire format.

The fake answers like Slack does: HTTP 200 with ``{"ok": false, "error": ...}`` for failures, HTTP 429 with a
``Retry-After`` header when rate limited, cursor pagination in ``response_metadata.next_cursor``, and
``search.messages`` only for user tokens.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from skyrl_integrations.mcp.servers._common import ToolError
from skyrl_integrations.mcp.servers.slack.live import LiveSlack, SlackWebClient

BOT_TOKEN = "xoxb-1111-2222-fakebottoken"  # pragma: allowlist secret
USER_TOKEN = "xoxp-3333-4444-fakeusertoken"  # pragma: allowlist secret

GENERAL = {"id": "C0GENERAL01", "name": "general", "is_channel": True, "is_private": False, "is_archived": False,
           "topic": {"value": "Announcements", "creator": "U0ALICE0001", "last_set": 1717000000}, "num_members": 3}  # fmt: skip
INCIDENTS = {"id": "C0INCIDENT1", "name": "incidents", "is_channel": True, "is_private": False, "is_archived": False,
             "topic": {"value": "Outages", "creator": "U0ALICE0001", "last_set": 1717000000}, "num_members": 2}  # fmt: skip
PARENT = {"type": "message", "user": "U0CAROL0001", "text": "INC-7: search is down", "ts": "1717415580.000200",
          "thread_ts": "1717415580.000200", "reply_count": 1, "reply_users_count": 1, "latest_reply": "1717416000.000300"}  # fmt: skip
OLDER = {"type": "message", "user": "U0BOB000001", "text": "deploying the fix", "ts": "1717410000.000100"}
REPLY = {"type": "message", "user": "U0BOB000001", "text": "root cause: expired cert", "ts": "1717416000.000300",
         "thread_ts": "1717415580.000200", "parent_user_id": "U0CAROL0001"}  # fmt: skip
BOB = {"id": "U0BOB000001", "team_id": "T0ACME0001", "name": "bob", "deleted": False, "real_name": "Bob Martinez",
       "tz": "America/New_York", "tz_label": "Eastern Daylight Time", "tz_offset": -14400, "is_bot": False,
       "profile": {"title": "Backend Engineer", "real_name": "Bob Martinez", "display_name": "bobby"}}  # fmt: skip
CAROL = {"id": "U0CAROL0001", "team_id": "T0ACME0001", "name": "carol", "deleted": False, "real_name": "Carol Okafor",
         "tz": "Europe/London", "is_bot": False, "profile": {"title": "SRE", "real_name": "Carol Okafor", "display_name": ""}}  # fmt: skip
BOB_OUT = {"id": "U0BOB000001", "name": "bob", "real_name": "Bob Martinez", "title": "Backend Engineer",
           "tz": "America/New_York", "is_bot": False}  # fmt: skip


def slack_app(requests: list[dict], state: dict) -> FastAPI:
    """Slack Web API methods under ``/api``; ``requests`` records each call, ``state`` scripts rate limiting."""
    app = FastAPI()

    @app.middleware("http")
    async def record_and_authenticate(request: Request, call_next):
        body = await request.body()
        requests.append(
            {
                "method": request.url.path.removeprefix("/api/"),
                "query": dict(request.query_params),
                "body": json.loads(body) if body else None,
                "authorization": request.headers.get("authorization"),
                "content_type": request.headers.get("content-type"),
            }
        )
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if token not in (BOT_TOKEN, USER_TOKEN):
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        if state.get("rate_limited", 0) > 0:
            state["rate_limited"] -= 1
            headers = {"Retry-After": str(state["retry_after"])}
            return JSONResponse({"ok": False, "error": "ratelimited"}, status_code=429, headers=headers)
        return await call_next(request)

    @app.get("/api/conversations.list")
    def conversations_list(cursor: str = ""):
        if cursor == "":
            return {"ok": True, "channels": [GENERAL], "response_metadata": {"next_cursor": "dGVhbTpDMDYxRkE1UEI="}}
        return {"ok": True, "channels": [INCIDENTS], "response_metadata": {"next_cursor": ""}}

    @app.get("/api/conversations.history")
    def conversations_history(channel: str, limit: int = 100):
        if channel != INCIDENTS["id"]:
            return {"ok": False, "error": "channel_not_found"}
        messages = [PARENT, OLDER][:limit]
        return {"ok": True, "messages": messages, "has_more": limit < 2, "pin_count": 0,
                "response_metadata": {"next_cursor": ""}}  # fmt: skip

    @app.get("/api/conversations.replies")
    def conversations_replies(channel: str, ts: str):
        if (channel, ts) != (INCIDENTS["id"], PARENT["ts"]):
            return {"ok": False, "error": "thread_not_found"}
        return {"ok": True, "messages": [PARENT, REPLY], "has_more": False}

    @app.get("/api/search.messages")
    def search_messages(request: Request, query: str):
        if not request.headers["authorization"].startswith("Bearer xoxp-"):
            return {"ok": False, "error": "not_allowed_token_type"}
        permalink = "https://acme.slack.com/archives/C0INCIDENT1/p1717416000000300?thread_ts=1717415580.000200&cid=C0INCIDENT1"  # fmt: skip
        match = {**REPLY, "iid": "0a1b2c", "team": "T0ACME0001", "username": "bob", "permalink": permalink,
                 "channel": {"id": INCIDENTS["id"], "name": "incidents", "is_private": False}}  # fmt: skip
        paging = {"count": 20, "total": 1, "page": 1, "pages": 1}
        return {"ok": True, "query": query, "messages": {"total": 1, "matches": [match], "paging": paging}}

    @app.post("/api/chat.postMessage")
    async def post_message(request: Request):
        body = await request.json()
        message = {"type": "message", "user": "U0BOT000001", "text": body["text"], "ts": "1717500000.000400"}
        return {"ok": True, "channel": body["channel"], "ts": "1717500000.000400", "message": message}

    @app.get("/api/users.info")
    def users_info(user: str):
        if user != BOB["id"]:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": BOB}

    @app.get("/api/users.list")
    def users_list(cursor: str = ""):
        return {"ok": True, "members": [CAROL, BOB], "response_metadata": {"next_cursor": ""}}

    return app


@pytest.fixture
def wire(serve_asgi):
    requests: list[dict] = []
    state: dict = {}
    with serve_asgi(slack_app(requests, state)) as base_url:
        yield f"{base_url}/api", requests, state


def live_slack(base_url: str, token: str = BOT_TOKEN) -> LiveSlack:
    return LiveSlack(SlackWebClient(token, base_url))


def test_list_channels_follows_the_cursor_to_the_last_page(wire):
    base_url, requests, _ = wire
    assert live_slack(base_url).list_channels() == {
        "channels": [
            {"id": "C0GENERAL01", "name": "general", "topic": "Announcements", "members": 3},
            {"id": "C0INCIDENT1", "name": "incidents", "topic": "Outages", "members": 2},
        ]
    }
    assert [request["query"].get("cursor") for request in requests] == [None, "dGVhbTpDMDYxRkE1UEI="]


def test_every_request_carries_the_token_as_a_bearer_header_only(wire):
    base_url, requests, _ = wire
    live_slack(base_url).list_channels()
    assert {request["authorization"] for request in requests} == {f"Bearer {BOT_TOKEN}"}
    assert all(BOT_TOKEN not in json.dumps(request["query"]) for request in requests)


def test_read_channel_resolves_the_name_and_maps_the_history(wire):
    base_url, requests, _ = wire
    assert live_slack(base_url).read_channel("#incidents", 1) == {
        "channel": "incidents",
        "messages": [
            {"ts": "1717415580.000200", "time": "2024-06-03 11:53 UTC", "user": "U0CAROL0001", "text": "INC-7: search is down", "reply_count": 1},  # fmt: skip
        ],
        "has_more": True,
    }
    assert requests[-1]["query"] == {"channel": "C0INCIDENT1", "limit": "1"}


def test_read_thread_maps_the_replies_oldest_first(wire):
    base_url, _, _ = wire
    assert live_slack(base_url).read_thread("incidents", "1717415580.000200") == {
        "channel": "incidents",
        "messages": [
            {"ts": "1717415580.000200", "time": "2024-06-03 11:53 UTC", "user": "U0CAROL0001", "text": "INC-7: search is down"},  # fmt: skip
            {"ts": "1717416000.000300", "time": "2024-06-03 12:00 UTC", "user": "U0BOB000001", "text": "root cause: expired cert"},  # fmt: skip
        ],
    }


def test_search_in_a_channel_adds_the_in_modifier_and_recovers_the_thread(wire):
    base_url, requests, _ = wire
    assert live_slack(base_url, USER_TOKEN).search_messages("root cause", "incidents") == {
        "query": "root cause",
        "total": 1,
        "matches": [
            {"channel": "incidents", "ts": "1717416000.000300", "time": "2024-06-03 12:00 UTC", "user": "U0BOB000001",
             "text": "root cause: expired cert", "thread_ts": "1717415580.000200"},  # fmt: skip
        ],
    }
    assert requests[-1]["query"] == {
        "query": "root cause in:#incidents",
        "count": "20",
        "sort": "timestamp",
        "sort_dir": "desc",
    }


def test_search_with_a_bot_token_reports_that_slack_needs_a_user_token(wire):
    base_url, _, _ = wire
    with pytest.raises(ToolError) as caught:
        live_slack(base_url).search_messages("root cause", None)
    assert str(caught.value) == (
        "Slack API error on search.messages: not_allowed_token_type "
        "(this method needs another token type (search.messages needs a user token, xoxp-))"
    )


def test_post_message_sends_utf8_json_to_the_channel_id(wire):
    base_url, requests, _ = wire
    assert live_slack(base_url).post_message("general", "Déploiement terminé", None) == {
        "ok": True,
        "channel": "general",
        "ts": "1717500000.000400",
    }
    assert (requests[-1]["method"], requests[-1]["content_type"], requests[-1]["body"]) == (
        "chat.postMessage",
        "application/json; charset=utf-8",
        {"channel": "C0GENERAL01", "text": "Déploiement terminé"},
    )


def test_get_user_by_id_calls_users_info(wire):
    base_url, requests, _ = wire
    assert live_slack(base_url).get_user("U0BOB000001") == BOB_OUT
    assert [request["method"] for request in requests] == ["users.info"]


def test_get_user_by_display_name_scans_users_list(wire):
    base_url, requests, _ = wire
    assert live_slack(base_url).get_user("@bobby") == BOB_OUT
    assert [request["method"] for request in requests] == ["users.list"]


def test_rate_limited_call_waits_for_retry_after_and_retries(wire):
    base_url, requests, state = wire
    slack = live_slack(base_url)
    slack.list_channels()
    state.update(rate_limited=1, retry_after=1)
    start = time.monotonic()
    assert slack.read_channel("incidents", 2)["messages"][1]["text"] == "deploying the fix"
    assert time.monotonic() - start >= 1.0
    assert [request["method"] for request in requests[2:]] == ["conversations.history", "conversations.history"]


def test_rate_limit_with_a_long_retry_after_fails_at_once(wire):
    base_url, _, state = wire
    slack = live_slack(base_url)
    slack.list_channels()
    state.update(rate_limited=1, retry_after=120)
    start = time.monotonic()
    with pytest.raises(ToolError, match=r"^Slack API rate limit on conversations.history: retry after 120 s$"):
        slack.read_channel("incidents", 2)
    assert time.monotonic() - start < 5  # did not sleep the 120 s


def test_ok_false_answer_becomes_a_tool_error_with_slacks_code(wire):
    base_url, _, _ = wire
    with pytest.raises(ToolError) as caught:
        live_slack(base_url).read_channel("C0ARCHIVED1", 5)
    assert str(caught.value) == (
        "Slack API error on conversations.history: channel_not_found "
        "(no such channel, or the bot cannot see it; use list_channels)"
    )


def test_unknown_channel_name_lists_the_known_channels(wire):
    base_url, _, _ = wire
    with pytest.raises(ToolError, match=r"^Unknown channel 'ops'. Valid channels include: general, incidents$"):
        live_slack(base_url).read_channel("ops", 5)


def test_rejected_token_is_reported_without_the_token(wire):
    base_url, _, _ = wire
    wrong_token = "xoxb-9999-wrong"  # pragma: allowlist secret
    with pytest.raises(ToolError) as caught:
        LiveSlack(SlackWebClient(wrong_token, base_url)).list_channels()
    assert str(caught.value) == (
        "Slack API error on conversations.list: invalid_auth (the token was rejected; check SLACK_BOT_TOKEN)"
    )


async def test_live_process_answers_over_stdio_and_never_logs_the_token(wire, call_tool, tmp_path):
    base_url, _, _ = wire
    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_BASE_URL": base_url}
    args = ["-m", "skyrl_integrations.mcp.servers.slack", "--mode", "live", "--log-level", "DEBUG"]
    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=tmp_path)
    with open(tmp_path / "stderr.log", "w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            read_result = await session.call_tool("read_channel", {"channel": "incidents", "limit": 1})
            failed = await session.call_tool("read_channel", {"channel": "C0ARCHIVED1"})
        errlog.seek(0)
        log = errlog.read()
    assert (read_result.is_error, json.loads(read_result.content[0].text)["messages"][0]["ts"]) == (
        False,
        "1717415580.000200",
    )
    assert failed.is_error
    assert failed.content[0].text.startswith("Error executing tool read_channel: Slack API error on")
    assert "DEBUG" in log
    assert BOT_TOKEN not in log
