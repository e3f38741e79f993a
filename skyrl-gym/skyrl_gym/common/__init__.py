"""Pure-Python helpers that skyrl-train and skyrl-integrations share: crash-safe file writes (`fs`), config blocks
as plain containers (`config`), trajectory stop reasons (`stop_reasons`) and what a trajectory achieved
(`outcomes`). They live here, the package both others depend on, so that skyrl-integrations installs without
skyrl-train (and so without torch or Ray). Import the submodule you need."""
