from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401
from skyrl_train.testing.s3 import s3_bucket, s3_server  # noqa: F401
