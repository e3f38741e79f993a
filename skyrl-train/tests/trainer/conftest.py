from skyrl_train.testing import tiny_model  # noqa: F401
from skyrl_train.testing_s3 import s3_bucket, s3_server  # noqa: F401
