"""A client that goes away stops its generation: the engine slots it held are freed."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from .conftest import MODEL_NAME


@pytest.mark.parametrize("stream", [False, True])
async def test_a_disconnected_client_stops_its_generation(server, engine, stream):
    request = {
        "model": MODEL_NAME,
        "prompt": [1, 2, 3],
        "max_tokens": 4000,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }
    async with httpx.AsyncClient(base_url=server.url, timeout=1.0) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/v1/completions", json=request)
    # Generation stops once the server notices (polls every 0.25 s); then no token is generated any more.
    await asyncio.sleep(1.0)
    settled = engine.stats.generated_tokens
    await asyncio.sleep(1.0)
    assert engine.stats.generated_tokens == settled
    assert 0 < settled < 4000
