"""Multi-turn GSM8K: the env nudges the model until it answers correctly or runs out of turns."""
