"""`ServingGate`: requests wait while it is closed, closing waits for admitted requests, and it works across
threads (requests on one event loop, the trainer on another)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from skyrl_train.serve import ServingGate, ServingStopped


async def hold(gate: ServingGate, events: list[str], name: str, release: asyncio.Event) -> None:
    async with gate.admit():
        events.append(f"{name} admitted")
        await release.wait()
    events.append(f"{name} done")


async def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def test_a_closed_gate_holds_requests_until_it_opens():
    gate, events, release = ServingGate(is_open=False), [], asyncio.Event()
    release.set()
    task = asyncio.create_task(hold(gate, events, "a", release))
    await wait_until(lambda: gate.waiting == 1)
    assert events == []
    gate.open()
    await task
    assert events == ["a admitted", "a done"]


async def test_closing_waits_for_admitted_requests_and_holds_new_ones():
    gate, events, release = ServingGate(is_open=True), [], asyncio.Event()
    first = asyncio.create_task(hold(gate, events, "a", release))
    await wait_until(lambda: gate.in_flight == 1)
    closing = asyncio.create_task(gate.close())
    await asyncio.sleep(0.05)
    assert not closing.done()  # "a" is still running
    second = asyncio.create_task(hold(gate, events, "b", release))
    await wait_until(lambda: gate.waiting == 1)
    release.set()
    await closing
    assert events == ["a admitted", "a done"]  # "b" waits for the next opening
    gate.open()
    await asyncio.gather(first, second)
    assert events == ["a admitted", "a done", "b admitted", "b done"]


async def test_closing_an_idle_gate_returns_at_once():
    gate = ServingGate(is_open=True)
    await asyncio.wait_for(gate.close(), timeout=1)
    assert not gate.is_open


async def test_stop_releases_waiting_requests_with_serving_stopped_and_refuses_new_ones():
    gate = ServingGate(is_open=False)
    release = asyncio.Event()
    waiting = asyncio.create_task(hold(gate, [], "a", release))
    await wait_until(lambda: gate.waiting == 1)
    gate.stop()
    with pytest.raises(ServingStopped):
        await waiting
    with pytest.raises(ServingStopped):
        await hold(gate, [], "b", release)


def test_requests_on_one_loop_are_opened_and_drained_from_another_thread():
    gate, events = ServingGate(is_open=False), []
    admitted = threading.Event()
    release = threading.Event()

    async def request():
        async with gate.admit():
            events.append("admitted")
            admitted.set()
            await asyncio.to_thread(release.wait)
        events.append("done")

    requests = threading.Thread(target=asyncio.run, args=(request(),))
    requests.start()

    async def trainer():
        gate.open()
        await asyncio.to_thread(admitted.wait, 5)
        closing = asyncio.create_task(gate.close())
        await asyncio.sleep(0.05)
        assert not closing.done()
        release.set()
        await asyncio.wait_for(closing, timeout=5)

    asyncio.run(trainer())
    requests.join(5)
    assert events == ["admitted", "done"]
