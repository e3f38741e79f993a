"""A Slack-style workspace as an MCP server: channels, messages, threads and users (SQLite offline, Slack Web API live).

Offline mode (default) serves the deterministic workspace of :mod:`.seed` from a private in-memory copy per server
process (see :mod:`.store` for what posted messages do to later calls). Live mode (``--mode live``) talks to Slack
with ``SLACK_BOT_TOKEN`` (see :mod:`.live`).
"""
