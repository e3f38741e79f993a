"""Command-line entrypoints (`python -m skyrl_train.entrypoints.main_base key=value ...`)."""
