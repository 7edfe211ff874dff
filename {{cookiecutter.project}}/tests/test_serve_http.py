"""serve.py over HTTP, one real server for the module (in a subprocess where torch cannot be
imported, with an API key) and a real client: every endpoint, the answers of predict.py, each
kind of bad request between good ones, and the API key. On the digits' export: the requests
are images (PNG files, 8x8 arrays); test_serve_table.py serves table rows."""

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import numpy as np
import pydantic_core
import pytest
from conftest import png_claiming, run_predict, save_pngs, without_torch
from PIL import Image
from servers import Server, Upload, call, send
from sklearn.datasets import load_digits

# Slow: a real server. One pytest worker runs the module, which starts it once.
pytestmark = pytest.mark.slow
KEY = "test-key-1f3a"  # the API key this module's server is started with
AUTH = {"X-API-Key": KEY}
KEY_HEADER = "X-API-Key header"
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> dict:
    """Raw digits as the dataset stores them (0..16), the same as PNG files, and what predict.py
    answers for each (top_k 1 and 3)."""
    folder = tmp_path_factory.mktemp("digits")
    images = load_digits().images[:40].astype(np.float32)
    np.save(folder / "digits.npy", images)
    pngs = save_pngs(images[:6], folder / "pngs")
    return {
        "images": images,
        "pngs": pngs,
        "folder": folder,
    }


@pytest.fixture(scope="module")
def expected(digits_export, digits) -> dict:
    """predict.py's answers for the digits: per sample, without the file and index it names."""
    folder = digits["folder"]

    def answers(input, name, *overrides):
        predicted = run_predict(digits_export, input, folder / name, *overrides)
        return [{k: v for k, v in p.items() if k not in ("file", "index")} for p in predicted]

    return {
        "arrays": answers(folder / "digits.npy", "arrays"),
        "top3": answers(folder / "digits.npy", "top3", "top_k=3"),
        "pngs": answers(folder / "pngs", "pngs"),
    }


@pytest.fixture(scope="module")
def server(digits_export, tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    env = {"SERVE_API_KEY": KEY, **without_torch(folder / "blocker")}
    with Server(digits_export, folder, env=env) as server:
        yield server


def post(server, **options):
    return call(
        "POST", f"{server.url}/predict", headers={**AUTH, **options.pop("headers", {})}, **options
    )


def test_health_page_and_info_without_torch_on_127_0_0_1(server, digits_export):
    health = call("GET", f"{server.url}/health")  # open: no key needed
    assert health.json() == {"status": "ok"}
    page = call("GET", f"{server.url}/")
    assert page.status == 200 and "Try the model" in page.text and '"type": "file"' in page.text
    info = call("GET", f"{server.url}/info", headers=AUTH).json()
    manifest = json.loads((digits_export / "manifest.json").read_text())
    assert info["task"] == "classification" and info["input"] == manifest["input"]
    assert info["classes"] == manifest["target"]["class_names"]
    assert info["model"]["sha256"] == manifest["formats"]["onnx"]["sha256"]
    assert info["versions"]["export"] == manifest["versions"]
    serving = {"uvicorn", "starlette", "onnxruntime", "numpy", "python"}
    assert set(info["versions"]["serve"]) >= serving
    listening = {
        connection.laddr
        for process in server.tree()
        for connection in process.net_connections("tcp")
        if connection.status == "LISTEN"
    }
    assert {(address.ip, address.port) for address in listening} == {("127.0.0.1", server.port)}


def test_answers_are_predict_py_s(server, digits, expected):
    images = digits["images"]
    batch = post(server, json={"inputs": images.tolist()})
    assert batch.status == 200, batch.text
    assert batch.json()["predictions"] == expected["arrays"]
    one = post(server, json={"inputs": images[7].tolist()})  # one sample, no batch axis
    assert one.json()["predictions"] == expected["arrays"][7:8]
    # With the channel axis: a batch, and one sample (or a batch of one without it: alike).
    channels = post(server, json={"inputs": images[:, None].tolist()})
    assert channels.json()["predictions"] == expected["arrays"]
    one = post(server, json={"inputs": images[7][None].tolist()})
    assert one.json()["predictions"] == expected["arrays"][7:8]
    top3 = post(server, json={"inputs": images[:5].tolist(), "top_k": 3})
    assert top3.json()["predictions"] == expected["top3"][:5]
    assert [len(p["top"]) for p in top3.json()["predictions"]] == [3] * 5
    for index, png in enumerate(digits["pngs"]):
        answer = post(server, data=Upload(png.read_bytes()))
        assert answer.json()["predictions"] == expected["pngs"][index : index + 1]
    assert post(server, data=MULTIPART, headers=MULTIPART_TYPE).status == 200  # as curl sends it
    query = post(server, data=Upload(digits["pngs"][0].read_bytes()), params={"top_k": "3"})
    assert len(query.json()["predictions"][0]["top"]) == 3
    both = post(server, json={"inputs": images[7].tolist(), "top_k": 2}, params={"top_k": "4"})
    assert len(both.json()["predictions"][0]["top"]) == 2  # the body's counts


class Chunked:
    """A body of `size` spaces sent in chunks, without a Content-Length."""

    def __init__(self, size: int):
        self.size = size

    async def __aiter__(self):
        for _ in range(self.size // 10_000):
            yield b" " * 10_000


DIGIT = load_digits().images[0].tolist()
PNG = io.BytesIO()
Image.fromarray(np.uint8(np.array(DIGIT) * 15)).save(PNG, "PNG")
# A well-formed upload of the PNG, as curl sends it, to cut short.
MULTIPART_TYPE = {"Content-Type": "multipart/form-data; boundary=XX"}
MULTIPART = (
    b'--XX\r\nContent-Disposition: form-data; name="file"; filename="digit.png"\r\n'
    b"Content-Type: image/png\r\n\r\n" + PNG.getvalue() + b"\r\n--XX--\r\n"
)
BAD_REQUESTS = {
    # name: (request options, status, what the reason says)
    "malformed JSON": (
        dict(data=b'{"inputs": [1,', headers=JSON),
        400,
        "not valid JSON: Expecting",
    ),
    "invalid UTF-8": (dict(data=b'{"inputs": "\xff"}', headers=JSON), 400, "not valid JSON"),
    "deep nesting": (dict(data=b"[" * 100_000, headers=JSON), 400, "not valid JSON"),
    "empty body": (dict(data=b"", headers=JSON), 400, "the body is empty"),
    "text/plain": (dict(data=b"hello", headers={"Content-Type": "text/plain"}), 415, "text/plain"),
    "JSON list": (dict(json=[1, 2]), 422, 'expected {"inputs": [...]} or {"rows"'),
    "unknown key": (dict(json={"input": DIGIT}), 422, "got keys ['input']"),
    "shape": (
        dict(json={"inputs": [[1, 2, 3]] * 3}),
        422,
        "has shape (3, 3); expected (N, 1, 8, 8)",
    ),
    "ragged": (dict(json={"inputs": [[1, 2], [3]]}), 422, "every row as long"),
    "nested 70 deep": (
        dict(data=b'{"inputs": ' + b"[" * 70 + b"1" + b"]" * 70 + b"}", headers=JSON),
        422,
        "inputs nests arrays 70 deep: send samples of the model's input shape",
    ),
    "no samples": (dict(json={"inputs": []}), 422, "has shape (0,); expected"),
    "strings": (dict(json={"inputs": [["a"] * 8] * 8}), 422, "expected raw values as numbers"),
    "nulls": (dict(json={"inputs": [[None] * 8] * 8}), 422, "holds object values"),
    "booleans": (dict(json={"inputs": [[True] * 8] * 8}), 422, "holds bool values"),
    "NaN": (dict(data=b'{"inputs": [NaN]}', headers=JSON), 422, "NaN is not a JSON number"),
    "-Infinity": (dict(data=b'{"inputs": -Infinity}', headers=JSON), 422, "-Infinity is not"),
    "1e999": (
        dict(data=json.dumps({"inputs": DIGIT}).replace("0.0", "1e999", 1).encode(), headers=JSON),
        422,
        "sample 0 holds NaN or infinite values",
    ),
    "5000 digits": (
        dict(
            data=json.dumps({"inputs": DIGIT}).replace("0.0", "9" * 5000, 1).encode(), headers=JSON
        ),
        422,
        "sample 0 holds NaN or infinite values",
    ),
    "beyond float32": (
        dict(json={"inputs": [DIGIT, (np.ones((8, 8)) * 1e39).tolist()]}),
        422,
        "sample 1 holds NaN or infinite values",
    ),
    "top_k 0": (dict(json={"inputs": DIGIT, "top_k": 0}), 422, "top_k=0 must be a whole number"),
    "top_k true": (dict(json={"inputs": DIGIT, "top_k": True}), 422, "top_k=True must be"),
    "top_k text": (dict(json={"inputs": DIGIT}, params={"top_k": "all"}), 422, "top_k=all"),
    "top_k text beside the body's": (
        dict(json={"inputs": DIGIT, "top_k": 3}, params={"top_k": "all"}),
        422,
        "top_k=all must be a whole number of at least 1",
    ),
    "a boolean among numbers": (
        dict(json={"inputs": [[1.0] * 7 + [True]] * 8}),
        422,
        "inputs: input should be a valid number, got true",
    ),
    "rows": (dict(json={"rows": [{"a": 1}]}), 422, 'this model takes images: send {"inputs"'),
    "outside value_range": (
        dict(json={"inputs": [DIGIT, (np.ones((8, 8)) * 17).tolist()]}),
        422,
        "inputs holds values from 17 to 17, outside 0..16: raw values as the training data",
    ),
    "not an image": (dict(data=Upload(b"not a png")), 400, "is not an image that Pillow can read"),
    "empty image": (dict(data=Upload(b"")), 400, "is not an image that Pillow can read"),
    "truncated image": (dict(data=Upload(PNG.getvalue()[:40])), 400, "not an image"),
    "field name": (dict(data=Upload(PNG.getvalue(), field="image")), 422, 'form field "file"'),
    "no boundary": (
        dict(data=b"abc", headers={"Content-Type": "multipart/form-data"}),
        400,
        "the multipart body is malformed",
    ),
    "no closing boundary": (
        dict(data=MULTIPART[: MULTIPART.index(b"\r\n--XX--")], headers=MULTIPART_TYPE),
        400,
        "the multipart body is malformed: it ends before its closing boundary",
    ),
    "cut in a part's headers": (
        dict(data=MULTIPART[:60], headers=MULTIPART_TYPE),
        400,
        "the multipart body is malformed",
    ),
    "no first boundary": (
        dict(data=b"garbage", headers=MULTIPART_TYPE),
        400,
        "the multipart body is malformed",
    ),
    "100 megapixels": (dict(data=Upload(png_claiming(10_000, 10_000))), 413, "pixels"),
    "200 megapixels": (dict(data=Upload(png_claiming(20_000, 10_000))), 413, "pixels"),
    "over the limit": (dict(json={"inputs": [0.0] * 400_000}), 413, "over max_request_bytes"),
    "too many samples": (
        dict(json={"inputs": [DIGIT] * 1025}),
        413,
        "the request holds 1025 samples, over max_request_samples=1024",
    ),
    "over the limit, chunked": (
        dict(data=Chunked(1_200_000), headers=JSON),
        413,
        "the body is over max_request_bytes=1048576",
    ),
}


@pytest.mark.parametrize(("options", "status", "reason"), BAD_REQUESTS.values(), ids=BAD_REQUESTS)
def test_a_bad_request_gets_a_4xx_with_one_line_and_the_next_good_one_its_answer(
    server, expected, options, status, reason
):
    answer = post(server, **options)
    assert answer.status == status, answer.text
    assert reason in answer.json()["detail"] and "\n" not in answer.text
    good = post(server, json={"inputs": DIGIT})
    assert good.json()["predictions"] == expected["arrays"][:1]


DIGIT_JSON = json.dumps(DIGIT)


def members(*pairs: str) -> str:
    """A JSON object of members written as they are, such as '"top_k": 3'."""
    return "{" + ", ".join(pairs) + "}"


def digit_with(value: str) -> str:
    """The digit's JSON body with its first value written as `value`."""
    return members('"inputs": ' + DIGIT_JSON.replace("0.0", value, 1))


ROWS = ", ".join(["[0, 1, 2, 3, 4, 5, 6, 7]"] * 8)
# JSON bodies, good and bad, that serving.py's fast parser (pydantic_core's) reads, or refuses
# for Python's json to read or explain; and the status each gets.
BODIES = {
    "one digit": (digit_with("0.0"), 200),
    "two, top_k 3": (members(f'"inputs": [{DIGIT_JSON}, {DIGIT_JSON}]', '"top_k": 3'), 200),
    "top_k 2.0": (members('"top_k": 2.0', f'"inputs": {DIGIT_JSON}'), 200),
    "a repeated key": (members('"inputs": [[1]]', f'"inputs": {DIGIT_JSON}'), 200),
    "integers": (members(f'"inputs": [{ROWS}]'), 200),
    "-0": (digit_with("-0"), 200),
    "an integer over 2**64": (digit_with(str(2**70)), 422),
    "1e999": (digit_with("1e999"), 422),
    "a boolean": (digit_with("true"), 422),
    "null": (digit_with("null"), 422),
    "text": (digit_with('"0"'), 422),
    "another key": (members(f'"inputs": {DIGIT_JSON}', '"input": 1'), 422),
    "a lone surrogate": (members('"inputs": [1]', '"\\ud800": 1'), 422),
    "NaN": (members('"inputs": [NaN]'), 422),
    "malformed": ('{"inputs": [1,', 400),
    "a list": ("[1, 2]", 422),
}
BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(("body", "status"), BODIES.values(), ids=BODIES)
def test_the_fast_json_parser_answers_as_python_s_json(server, body, status):
    """A UTF-8 byte order mark, which Python's json skips and pydantic_core's parser refuses,
    sends the same body to Python's parser: every answer is the same, byte for byte."""
    with pytest.raises(ValueError):
        pydantic_core.from_json(BOM + body.encode())
    fast = post(server, data=body.encode(), headers=JSON)
    full = post(server, data=BOM + body.encode(), headers=JSON)
    assert fast.status == status, fast.text
    assert (full.status, full.text) == (fast.status, fast.text)


def test_get_predict_is_405(server):
    assert call("GET", f"{server.url}/predict", headers=AUTH).status == 405


def test_a_client_that_disconnects_mid_body_leaves_no_traceback_in_the_log(server, digits):
    head = f"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {KEY}\r\n"
    part = '--XX\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n\r\n'
    for request in [
        # An upload, and gone 99,900 bytes short.
        f"{head}Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 100000\r\n"
        f"\r\n{part}\x89PNG",
        # JSON in chunks, gone after the first.
        f"{head}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        '9\r\n{"inputs":\r\n',
        # JSON, gone after half its declared length.
        head + 'Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{"inputs": [1,',
    ]:
        with socket.create_connection(("127.0.0.1", server.port)) as client:
            client.sendall(request.encode("latin-1"))
    answer = post(server, data=Upload(digits["pngs"][0].read_bytes()))  # served after them
    assert answer.status == 200
    assert "Traceback" not in server.output() and "ClientDisconnect" not in server.output()


def test_bad_requests_among_good_ones_at_once_fail_alone(server, digits, expected):
    """Sent together, the good ones share batches; the bad ones are refused before them."""
    images = digits["images"]
    good = [dict(json={"inputs": images[index].tolist()}) for index in range(32)]
    bad = [options for options, status, _ in BAD_REQUESTS.values() if status == 422][:8]

    async def all_at_once():
        async with aiohttp.ClientSession(headers=AUTH) as session:
            url = f"{server.url}/predict"
            return await asyncio.gather(*[send(session, "POST", url, **o) for o in good + bad])

    answers = asyncio.run(all_at_once())
    singles = [[prediction] for prediction in expected["arrays"][:32]]
    assert [answer.json()["predictions"] for answer in answers[:32]] == singles
    assert [a.status for a in answers[32:]] == [422] * len(bad)


def test_without_the_api_key_predict_and_info_get_401(server):
    url = server.url
    for answer in [
        call("POST", f"{url}/predict", json={"inputs": DIGIT}),
        call("POST", f"{url}/predict", json={"inputs": DIGIT}, headers={"X-API-Key": "wrong"}),
        call("GET", f"{url}/info"),
        call("POST", f"{url}/predict", data=b"0" * 2_000_000, headers=JSON),  # refused unread
    ]:
        assert answer.status == 401
        assert answer.json()["detail"] == f"missing or wrong API key: send it in the {KEY_HEADER}"
    assert call("GET", f"{url}/health").status == call("GET", f"{url}/").status == 200


def test_openapi_json_describes_the_json_forms_the_upload_and_every_answer(server):
    document = call("GET", f"{server.url}/openapi.json").json()  # open: it holds no data
    predict = document["paths"]["/predict"]["post"]
    assert set(predict["requestBody"]["content"]) == {"application/json", "multipart/form-data"}
    (inputs,) = predict["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    request = document["components"]["schemas"][inputs["$ref"].split("/")[-1]]
    assert set(request["properties"]) == {"inputs", "top_k"}
    statuses = {"200", "400", "401", "408", "413", "415", "422", "503"}
    assert set(predict["responses"]) == statuses
    assert predict["security"] == [{"APIKey": []}]
    assert {"/health", "/info", "/"} < set(document["paths"])


def test_schemathesis_with_every_check_finds_nothing(server, tmp_path):
    """Schemathesis, a validator written elsewhere, generates requests from /openapi.json
    (a bounded number per operation) and checks every answer against it; its uploads are image
    files of every type the document names (schemathesis_hooks.py), so every request it calls
    valid must get its answer."""
    hooks = {"SCHEMATHESIS_HOOKS": "schemathesis_hooks", "PYTHONPATH": str(Path(__file__).parent)}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "run",
            f"{server.url}/openapi.json",
            "--checks=all",
            "--max-examples=20",
            "--seed=1",
            f"--header=X-API-Key: {KEY}",
            "--no-color",
        ],
        cwd=tmp_path,
        env={**os.environ, **hooks},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
