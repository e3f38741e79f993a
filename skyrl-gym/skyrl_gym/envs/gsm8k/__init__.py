"""GSM8K-style math environment: the answer follows `#### ` at the end of the response."""
