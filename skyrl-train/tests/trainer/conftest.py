from skyrl_train.testing import tiny_model  # noqa: F401
