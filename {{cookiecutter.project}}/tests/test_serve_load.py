"""serve.py under load, bounded: 2,000 requests at concurrency 32 against a real server with
batching on, each one answered, and answered right, while the server's memory stays flat. On the
digits' export, whose requests (8x8 arrays, PNG files) are the ones measured in benchmarks/."""

import asyncio
import itertools

import aiohttp
import numpy as np
import pytest
from conftest import save_pngs
from servers import Server, Upload, send
from sklearn.datasets import load_digits

from {{ cookiecutter.package }}.inference import from_arrays, load_export, predictions
from {{ cookiecutter.package }}.kinds.image import from_files

pytestmark = pytest.mark.slow  # a server of several processes, and 2,400 requests
CONCURRENCY = 32
# Resident memory that the server's processes may gain over the second half of the run: a leak
# of one kilobyte per request would be 1 MiB there. The first requests of each kind grow them by a
# few MiB once (buffers, the thread pool, the multipart parser), which the warm-up covers.
GROWTH = 4 * 2**20


@pytest.fixture(scope="module")
def server(digits_export, tmp_path_factory):
    with Server(digits_export, tmp_path_factory.mktemp("serve")) as server:
        yield server


@pytest.fixture(scope="module")
def requests(digits_export, tmp_path_factory) -> list[tuple[dict, list[dict]]]:
    """Requests of every kind, each with the answer that predict.py's functions give: one digit
    (top_k 1 or 3), 8 digits at once, a PNG upload."""
    session, manifest = load_export(digits_export)
    images = load_digits().images[:120]
    pngs = save_pngs(images[:20], tmp_path_factory.mktemp("pngs"))
    requests = []
    for index, image in enumerate(images[:100]):
        top_k = 1 + 2 * (index % 2)
        answer = predictions(session, manifest, from_arrays(image, manifest, "digit"), top_k)
        requests.append(({"json": {"inputs": image.tolist(), "top_k": top_k}}, answer))
    for start in range(0, 120, 8):
        batch = images[start : start + 8]
        answer = predictions(session, manifest, from_arrays(batch, manifest, "digits"))
        requests.append(({"json": {"inputs": batch.tolist()}}, answer))
    for png in pngs:
        data = png.read_bytes()
        answer = predictions(session, manifest, from_files([data], manifest.preprocessing))
        requests.append(({"data": Upload(data)}, answer))
    return requests


def run(server, requests, count: int) -> list[tuple]:
    """`count` of `requests`, in turn, from CONCURRENCY clients at once; each one's answer."""
    chosen = list(itertools.islice(itertools.cycle(requests), count))
    answers = [None] * count

    async def load():
        connector = aiohttp.TCPConnector(limit=CONCURRENCY)
        async with aiohttp.ClientSession(connector=connector) as session:
            queue = iter(enumerate(chosen))

            async def client():
                for index, (options, _) in queue:
                    answers[index] = await send(
                        session, "POST", f"{server.url}/predict", **options
                    )

            await asyncio.gather(*[client() for _ in range(CONCURRENCY)])

    asyncio.run(load())
    return [(answer, expected) for answer, (_, expected) in zip(answers, chosen, strict=True)]


def right(answer, expected: list[dict]) -> bool:
    """The answer predict.py gives; batching may run a sample with others in one call, which can
    move its probabilities in the last digits."""
    if answer.status != 200:
        return False
    got = answer.json()["predictions"]
    classes = [[p["class"], [t["class"] for t in p.get("top", [])]] for p in got]
    wanted = [[p["class"], [t["class"] for t in p.get("top", [])]] for p in expected]
    probabilities = [p["probability"] for p in got]
    return classes == wanted and np.allclose(
        probabilities, [p["probability"] for p in expected], atol=1e-5
    )


def test_2000_requests_at_concurrency_32_all_right_and_memory_flat(server, requests):
    assert all(right(*pair) for pair in run(server, requests, 400))  # warm-up, every kind
    before = server.memory()
    first = run(server, requests, 1000)
    middle = server.memory()
    second = run(server, requests, 1000)
    after = server.memory()
    wrong = [answer for answer, expected in first + second if not right(answer, expected)]
    assert not wrong, wrong[:3]
    assert after - middle < GROWTH, (before, middle, after)
    assert "Traceback" not in server.output()
