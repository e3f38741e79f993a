"""``python -m skyrl_integrations.mcp.servers.python [--transport ...]`` (limits come from ``SKYRL_PYTHON_*``)."""

from .._common import serve
from .server import build_server

if __name__ == "__main__":
    serve(build_server)
