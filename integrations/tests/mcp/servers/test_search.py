"""The search server in offline mode: Tavily-shaped results from the shipped corpus via SQLite FTS5."""

from __future__ import annotations

import pytest
from mcp.client.client import Client

from skyrl_integrations.mcp.servers.market.data import COMPANIES
from skyrl_integrations.mcp.servers.search.corpus import CORPUS_PATH, build_corpus, corpus_text, load_corpus
from skyrl_integrations.mcp.servers.search.offline import OfflineSearch
from skyrl_integrations.mcp.servers.search.server import create_server

HELIX_INVESTORS = {
    "title": "Helix Robotics Inc. investor relations",
    "url": "https://helix-robotics.example/investors",
    "content": "Helix Robotics Inc. (NASDAQ: HLXR) is a maker of warehouse robots headquartered in Zelhaven. It was "
    "founded in 1969 and went public in 2021.",
    "score": 0.7449,
}


@pytest.fixture(scope="module")
def backend():
    return OfflineSearch()


@pytest.fixture
def search(backend):
    return Client(create_server(backend))


def test_shipped_corpus_is_the_generators_output():
    assert CORPUS_PATH.read_text(encoding="utf-8") == corpus_text(build_corpus())


def test_corpus_has_about_two_hundred_documents_with_unique_urls():
    docs = load_corpus()
    assert (len(docs), len({d["url"] for d in docs})) == (209, 209)


def test_corpus_describes_every_fictional_listed_company_with_its_ticker():
    summaries = [d["summary"] for d in load_corpus() if d["kind"] == "listed_company"]
    expected = [f"{c.name} ({c.exchange}: {c.ticker})" for c in COMPANIES if c.fictional]
    assert [s[: len(e)] for s, e in zip(summaries, expected, strict=True)] == expected


def test_bad_corpus_line_names_file_and_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"url": "u", "title": "t", "summary": "s", "body": "b"}\n{"url": "u2", "title": 3}\n')
    with pytest.raises(ValueError, match=r"corpus.jsonl:2: record lacks string field\(s\) \['title', 'summary', 'body'\]"):  # fmt: skip
        load_corpus(path)


async def test_stdio_process_lists_web_search_and_fetch_page(stdio_server):
    async with stdio_server("search") as client:
        tools = await client.list_tools()
    assert [t.name for t in tools.tools] == ["web_search", "fetch_page"]


async def test_web_search_returns_tavily_shaped_results(search, call_tool):
    async with search as client:
        answer = await call_tool(client, "web_search", {"query": "Helix Robotics headquarters", "max_results": 1})
    assert answer == (False, {"query": "Helix Robotics headquarters", "results": [HELIX_INVESTORS]})


async def test_web_search_returns_three_results_by_default(search, call_tool):
    async with search as client:
        _, answer = await call_tool(client, "web_search", {"query": "Helix Robotics"})
    assert len(answer["results"]) == 3


async def test_web_search_ranks_the_page_that_answers_first(search, call_tool):
    async with search as client:
        _, answer = await call_tool(client, "web_search", {"query": "who makes the Strider warehouse robot"})
    assert answer["results"][0]["url"] == "https://helix-robotics.example/strider"


async def test_fts_syntax_in_the_query_is_treated_as_words(search, call_tool):
    async with search as client:
        is_error, answer = await call_tool(client, "web_search", {"query": '"( AND OR NOT * harholm', "max_results": 1})
    assert (is_error, answer["results"][0]["url"]) == (False, "https://travel-notes.example/guides/harholm")


async def test_query_without_searchable_words_is_an_error(search, call_tool):
    async with search as client:
        is_error, text = await call_tool(client, "web_search", {"query": "what is the?"})
    assert is_error and "query has no searchable words" in text


async def test_max_results_out_of_range_is_an_error(search, call_tool):
    async with search as client:
        is_error, text = await call_tool(client, "web_search", {"query": "Harholm", "max_results": 50})
    assert is_error and "max_results must be between 1 and 10, got 50" in text


async def test_unmatched_query_returns_no_results(search, call_tool):
    async with search as client:
        answer = await call_tool(client, "web_search", {"query": "xylophonequark"})
    assert answer == (False, {"query": "xylophonequark", "results": []})


async def test_fetch_page_returns_the_full_text(search, call_tool):
    async with search as client:
        answer = await call_tool(client, "fetch_page", {"url": "https://wiki.example/harholm"})
    assert answer == (
        False,
        {
            "url": "https://wiki.example/harholm",
            "title": "Harholm - town in Oregon",
            "content": "Harholm is a town in Oregon on the Brisk River, with a population of 16,258 at the last census. "
            "It was founded in 1714. The town centre sits at an elevation of 52 metres. Harholm is best known for its "
            "winter ice-fishing derby. Its economy grew around river trade on the Brisk before the railway arrived.",
        },
    )


async def test_fetch_page_of_an_unknown_url_is_an_error(search, call_tool):
    async with search as client:
        is_error, text = await call_tool(client, "fetch_page", {"url": "https://nowhere.example/"})
    assert (
        is_error and "No page at 'https://nowhere.example/': fetch_page opens the URLs that web_search returns" in text
    )
