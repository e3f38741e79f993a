"""The tiny model and its tokenizer for every engine test (the hf engine's own fixtures are in hf/conftest.py)."""

from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401
