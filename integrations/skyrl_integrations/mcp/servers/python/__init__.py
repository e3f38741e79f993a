"""Sandboxed Python execution as an MCP server: one tool, ``run_python(code, timeout_s=None)``.

Every call runs in a fresh interpreter (``skyrl_gym.tools.python.execute_python``): its own empty temporary working
directory (deleted afterwards), address-space and CPU limits, a wall-clock limit that kills the whole process group,
stdin closed, bounded output, and no network. There is no live mode: nothing here calls an outside API.
"""
