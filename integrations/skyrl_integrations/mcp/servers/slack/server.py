"""The Slack MCP server: Slack-Web-API-flavoured tools over a backend (the offline store or the live API).

Tools: ``list_channels``, ``read_channel``, ``read_thread``, ``search_messages``, ``post_message``, ``get_user``.
Every tool returns short JSON; messages carry the author's user id (``get_user`` resolves it). Argument checks that
do not depend on the backend happen here, so both backends answer bad input the same way.
"""

from __future__ import annotations

from typing import Annotated, Protocol

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from .._common import Mode, ToolError, to_json
from .output import MAX_SEARCH_RESULTS

MAX_LIMIT = 50  # messages per read_channel call
ChannelArg = Annotated[str, Field(description="channel name (general or #general) or id")]
Ts = Annotated[str, Field(description="message timestamp as shown in the ts field, e.g. 1717415580.000002")]


class SlackBackend(Protocol):
    def list_channels(self) -> dict: ...
    def read_channel(self, channel: str, limit: int) -> dict: ...
    def read_thread(self, channel: str, ts: str) -> dict: ...
    def search_messages(self, query: str, channel: str | None) -> dict: ...
    def post_message(self, channel: str, text: str, thread_ts: str | None) -> dict: ...
    def get_user(self, user: str) -> dict: ...


def build_server(mode: Mode) -> MCPServer:
    """The Slack server for ``mode``; live mode raises ``LiveModeError`` when no ``SLACK_BOT_TOKEN`` is configured."""
    if mode == "live":
        from .live import LiveSlack

        backend: SlackBackend = LiveSlack.from_env()
    else:
        from .store import OfflineSlack

        backend = OfflineSlack()
    return create_server(backend)


def create_server(backend: SlackBackend) -> MCPServer:
    server = MCPServer("slack", instructions="A Slack workspace: channels, messages, threads and users.")

    @server.tool(structured_output=False)
    def list_channels() -> str:
        """List the workspace's channels with their id, topic and number of members."""
        return to_json(backend.list_channels())

    @server.tool(
        structured_output=False,
        description="The newest top-level messages of a channel, newest first. Thread replies are only counted "
        "(reply_count); read them with read_thread.",
    )
    def read_channel(
        channel: ChannelArg,
        limit: Annotated[int, Field(description=f"how many of the newest messages to return (1-{MAX_LIMIT})")] = 10,
    ) -> str:
        if limit < 1:
            raise ToolError(f"limit must be at least 1, got {limit}")
        return to_json(backend.read_channel(channel, min(limit, MAX_LIMIT)))

    @server.tool(structured_output=False)
    def read_thread(channel: ChannelArg, ts: Ts) -> str:
        """A thread: its first message followed by all replies, oldest first."""
        return to_json(backend.read_thread(channel, ts))

    @server.tool(
        structured_output=False,
        description=f"Search all messages, thread replies included, newest first (at most {MAX_SEARCH_RESULTS} "
        "matches; total counts all of them).",
    )
    def search_messages(
        query: Annotated[str, Field(description="words that must all appear in the message (case-insensitive)")],
        channel: Annotated[str | None, Field(description="only search this channel (name or id)")] = None,
    ) -> str:
        if not query.strip():
            raise ToolError("The search query is empty: give one or more words to look for")
        return to_json(backend.search_messages(query.strip(), channel))

    @server.tool(structured_output=False)
    def post_message(
        channel: ChannelArg,
        text: Annotated[str, Field(description="the message to post")],
        thread_ts: Annotated[str | None, Field(description="ts of a top-level message to reply in its thread")] = None,
    ) -> str:
        """Post a message to a channel (or as a reply in a thread); returns the new message's ts."""
        if not text.strip():
            raise ToolError("The message text is empty")
        return to_json(backend.post_message(channel, text, thread_ts))

    @server.tool(structured_output=False)
    def get_user(user: Annotated[str, Field(description="user id (U02BOB), handle (bob or @bob) or full name")]) -> str:
        """A user's id, handle, full name, job title, time zone and whether it is a bot."""
        return to_json(backend.get_user(user))

    return server
