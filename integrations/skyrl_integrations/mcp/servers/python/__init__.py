"""Sandboxed Python execution as an MCP server: one tool, ``run_python(code, timeout_s=None)``.

Every call runs in a fresh interpreter (``skyrl_gym.tools.python.execute_python``) in a sandbox
(``skyrl_gym.tools.sandbox``): its own empty temporary working directory (deleted afterwards) as the only writable
folder, no view of the home folder, the repository or checkpoints, address-space and CPU limits, a wall-clock limit
that kills the whole process group, stdin closed, bounded output, and no network unless
``SKYRL_PYTHON_ALLOW_NETWORK=1``. There is no live mode: nothing here calls an outside API.
"""
