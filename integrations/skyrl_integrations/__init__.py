"""skyrl_integrations: tool-call parsing, MCP and tau-bench environments, datasets and eval analysis."""

__version__ = "0.2.0"
