"""`EngineRouter`: which engine serves each prompt (session affinity, even chunks, single prompts spread)."""

from __future__ import annotations

import pytest

from skyrl_train.inference_engines.routing import EngineRouter, engine_for_session


def test_a_session_always_goes_to_sha256_mod_n():
    # sha256("episode-7")[:8] as a big-endian integer, mod 3 (computed independently with hashlib).
    import hashlib

    expected = int.from_bytes(hashlib.sha256(b"episode-7").digest()[:8], "big") % 3
    assert engine_for_session("episode-7", 3) == expected
    router = EngineRouter(3)
    for _ in range(4):  # every turn of the episode
        routes = router.route(1, ["episode-7"])
        assert routes[expected] == [0] and sum(len(r) for r in routes) == 1


def test_a_batch_with_session_ids_is_split_by_session():
    router = EngineRouter(2)
    sessions = ["a", "b", "a", "c", "b"]
    routes = router.route(5, sessions)
    for engine, indices in enumerate(routes):
        assert all(engine_for_session(sessions[i], 2) == engine for i in indices)
    assert sorted(i for r in routes for i in r) == [0, 1, 2, 3, 4]


def test_a_batch_without_session_ids_is_split_into_contiguous_near_even_chunks():
    assert EngineRouter(3).route(7) == [[0, 1, 2], [3, 4], [5, 6]]
    assert EngineRouter(3).route(2) == [[0], [1], []]


def test_single_prompts_without_sessions_take_the_engines_in_turn():
    router = EngineRouter(3)
    firsts = [next(i for i, r in enumerate(router.route(1)) if r) for _ in range(4)]
    assert firsts == [0, 1, 2, 0]


def test_session_ids_must_match_the_prompts():
    with pytest.raises(ValueError, match="2 session ids for 3 prompts"):
        EngineRouter(2).route(3, ["a", "b"])
