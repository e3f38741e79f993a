from skyrl_train.testing.s3 import s3_bucket, s3_server  # noqa: F401
