"""Format extractors: each finds the call attempts of one family of formats in a message.

Every extractor is `extract(text, registry) -> list[CallAttempt]`, runs in time linear in the text (bounded work
per candidate position) and never raises on any text.
"""
