"""Synthetic MCP question datasets: the row schema (``schema``), generators (``rule_based``, ``llm_based``), the
dependent-spec converter (``dependent_spec``), writing train/validation files (``io``) and the validator CLI
(``validate``). Import the submodule you need; this package imports nothing eagerly."""
