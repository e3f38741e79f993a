"""Text-to-SQL environment: the model explores a SQLite database with `<sql>` and answers with `<solution>`."""
