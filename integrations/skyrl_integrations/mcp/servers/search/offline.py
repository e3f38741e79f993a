"""Offline backend of the search server: SQLite FTS5 (BM25) over the shipped corpus, built in memory at start-up."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from .._common import ToolError
from .corpus import CORPUS_PATH, load_corpus

MAX_RESULTS = 10

# Words that match nearly every document and only dilute BM25.
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "how",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "with",
        "does",
        "did",
        "do",
        "its",
        "this",
        "that",
    ]
)


def query_terms(query: str) -> list[str]:
    """The words of ``query`` that go into the FTS5 match (lower-cased, stopwords dropped, each quoted as a phrase
    so no user text is parsed as FTS5 syntax)."""
    words = re.findall(r"[0-9a-z]+", query.lower())
    return [w for w in dict.fromkeys(words) if w not in _STOPWORDS]


class OfflineSearch:
    def __init__(self, corpus_path: Path = CORPUS_PATH) -> None:
        self._docs = {doc["url"]: doc for doc in load_corpus(corpus_path)}
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE VIRTUAL TABLE pages USING fts5(url UNINDEXED, title, text, tokenize='porter')")
        self._db.executemany(
            "INSERT INTO pages (url, title, text) VALUES (?, ?, ?)",
            [(d["url"], d["title"], f"{d['summary']} {d['body']}") for d in self._docs.values()],
        )

    def search(self, query: str, max_results: int = 3) -> dict:
        if not 1 <= max_results <= MAX_RESULTS:
            raise ToolError(f"max_results must be between 1 and {MAX_RESULTS}, got {max_results}")
        terms = query_terms(str(query))
        if not terms:
            raise ToolError("query has no searchable words: describe what you are looking for, e.g. 'Helix Robotics'")
        match = " OR ".join(f'"{t}"' for t in terms)
        # bm25() is lower-is-better; the title counts 4x the text.
        rows = self._db.execute(
            "SELECT url, bm25(pages, 4.0, 1.0) AS rank FROM pages WHERE pages MATCH ? ORDER BY rank, url LIMIT ?",
            (match, max_results),
        ).fetchall()
        results = []
        for url, rank in rows:
            doc = self._docs[url]
            relevance = -rank
            results.append(
                {
                    "title": doc["title"],
                    "url": url,
                    "content": doc["summary"],
                    "score": round(relevance / (relevance + 5.0), 4),
                }
            )
        return {"query": query, "results": results}

    def fetch(self, url: str) -> dict:
        doc = self._docs.get(str(url).strip())
        if doc is None:
            raise ToolError(f"No page at {url!r}: fetch_page opens the URLs that web_search returns")
        return {"url": doc["url"], "title": doc["title"], "content": f"{doc['summary']} {doc['body']}"}
