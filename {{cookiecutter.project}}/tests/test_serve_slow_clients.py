"""Slow and idle clients against a real server (one, on 127.0.0.1): a bounded number of them
hold partial headers, part of a body or nothing at all, while good clients are still answered;
the server closes them after read_timeout, and requests beyond max_connections get 503."""

import asyncio

import pytest
from servers import Server, call
from sklearn.datasets import load_digits

from {{ cookiecutter.package }}.serving import BodyDeadlines

pytestmark = pytest.mark.slow  # a server of several processes
READ_TIMEOUT = 2  # seconds, as the server is started
MAX_CONNECTIONS = 40
DIGIT = load_digits().images[0].tolist()
# How long a slow client waits for the server to close its connection: far beyond READ_TIMEOUT.
PATIENCE = 30


@pytest.fixture(scope="module")
def server(digits_export, tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    overrides = [f"read_timeout={READ_TIMEOUT}", f"max_connections={MAX_CONNECTIONS}"]
    with Server(digits_export, folder, *overrides) as server:
        yield server


async def slow_client(server, sent: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that sends `sent` and then nothing more."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(sent)
    await writer.drain()
    return reader, writer


async def what_it_gets(reader: asyncio.StreamReader) -> bytes:
    """All the server sends until it closes the connection."""
    return await asyncio.wait_for(reader.read(), PATIENCE)


PARTIAL_HEADERS = b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl"
PARTIAL_BODY = (
    b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b'Content-Length: 1000\r\n\r\n{"inputs": ['
)


def good(server) -> int:
    answer = call("POST", f"{server.url}/predict", json={"inputs": DIGIT})
    assert answer.status != 200 or "predictions" in answer.json()
    return answer.status


def test_good_clients_are_served_while_slow_ones_hang_and_those_are_closed(server):
    async def run():
        headers = [await slow_client(server, PARTIAL_HEADERS) for _ in range(25)]
        bodies = [await slow_client(server, PARTIAL_BODY) for _ in range(5)]
        idle = [await slow_client(server, b"") for _ in range(5)]
        # 35 connections held, under max_connections: every good client gets its answer.
        statuses = [await asyncio.to_thread(good, server) for _ in range(10)]
        got = await asyncio.gather(*[what_it_gets(r) for r, _ in headers + bodies + idle])
        for _, writer in headers + bodies + idle:
            writer.close()
        return statuses, got

    statuses, got = asyncio.run(run())
    assert statuses == [200] * 10
    # Closed by the server: without an answer while the headers were incomplete, with 408 once
    # the body was late.
    assert got[:25] == [b""] * 25 and got[30:] == [b""] * 5
    for answer in got[25:30]:
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert answer.endswith(b'{"detail":"the body did not arrive within read_timeout=2.0 s"}')


def test_beyond_max_connections_a_request_gets_503_at_once_until_slow_ones_are_closed(server):
    async def run():
        held = [await slow_client(server, b"") for _ in range(MAX_CONNECTIONS)]
        beyond = await asyncio.to_thread(good, server)
        await asyncio.gather(*[what_it_gets(reader) for reader, _ in held])
        for _, writer in held:
            writer.close()
        return beyond, await asyncio.to_thread(good, server)

    assert asyncio.run(run()) == (503, 200)


def test_a_body_deadline_holds_in_each_event_loop_that_serves_the_app():
    """One timer serves every body being read; the loop it was armed in may end before it
    fires (an app served by one loop, then another), and a late reader is still cancelled."""
    deadlines = BodyDeadlines(0.05)

    async def read_quickly() -> None:
        deadlines.end(deadlines.begin())

    async def read_slowly() -> bool:
        task = deadlines.begin()
        try:
            await asyncio.sleep(PATIENCE)
        except asyncio.CancelledError:
            return task in deadlines.late
        finally:
            deadlines.end(task)
        return False

    asyncio.run(read_quickly())  # ends with the timer armed, for a deadline not yet come
    assert asyncio.run(read_slowly())
    assert not deadlines.reading and not deadlines.late
