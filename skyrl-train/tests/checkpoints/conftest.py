from skyrl_train.testing_s3 import s3_bucket, s3_server  # noqa: F401
