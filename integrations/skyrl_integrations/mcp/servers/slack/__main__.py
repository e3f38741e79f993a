"""``python -m skyrl_integrations.mcp.servers.slack [--transport ...] [--mode offline|live]``."""

from .._common import serve
from .server import build_server

if __name__ == "__main__":
    serve(build_server)
