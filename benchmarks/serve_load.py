"""Throughput and latency of serving the export over HTTP, at several concurrencies, side by side:

    python benchmarks/serve_load.py [--requests 3000] [--levels 1 8 32] [--samples-per-request 1]
                                    [--workers 1 2] [--rounds 3] [--export DIR [--texts CSV]]
                                    [--threads 1] [--project DIR]

Trains the default project briefly and exports it (or takes the export.py folder of an image
or text model, --export), then sends JSON requests of raw values (digits; random values for
another image model; the texts of --texts for a text model) at each concurrency, with each
number of server processes, to:

- serve:            the project's serve.py with its defaults (batching on);
- serve_unbatched:  serve.py with max_batch_size=1;
- fastapi_def:      the FastAPI app a user would write instead, a `def` endpoint under uvicorn
                    with as many workers (serve_baselines.py);
- asgi_constant:    the floor of any Python server on uvicorn: an ASGI app that reads each request
                    and answers a constant, no framework, no model (serve_baselines.py);
- serve_model_free: serve.py with the model's call replaced by one that repeats one answer (one
                    process only; not in the defaults, ask with --variants): what the server costs
                    besides the model (serve_baselines.py);
- in_process:       the limit, onnxruntime called in one process on the batches that C requests
                    make, from raw values to predictions, with no HTTP (serve_baselines.py).

Each round starts every server in turn, in rotating order; each cell is the median of its rounds
(errors: their sum), so that a machine that runs slower for a minute slows one round of each
variant rather than one variant. The client is one process of keep-alive connections on asyncio streams (uvloop where installed),
lean enough that the floor, not the client, sets the pace; it runs on the same machine and takes
its share of the cores. Every answer but the floor's is checked against in-process predictions
after the cell. The server's CPU per request (all its processes, psutil) is steadier than
throughput on a busy machine. Goals (issue 24), with one server process, one sample per request:
at concurrency 32 at least 0.5x the floor and 4x the FastAPI app, at most 100 us of server CPU
per request, p99 at concurrency 1 at most 2 ms; with --samples-per-request 64, at the top
concurrency at least 0.5x onnxruntime in-process in samples/s.
"""

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil
from common import (
    HERE,
    add_arguments,
    project_env,
    python,
    report,
    setup,
    train_and_export,
)

VARIANTS = ["serve", "serve_unbatched", "fastapi_def", "asgi_constant", "in_process"]
# Asked for by name only; their answers are not the model's, and they run one process.
EXTRA_VARIANTS = ["serve_model_free"]
# What each round measures of a server at one concurrency, and the cells report the median of.
FIGURES = ["samples_per_s", "p50_ms", "p99_ms", "server_cpu_us", "client_cpu_us"]
try:
    import uvloop
except ModuleNotFoundError:
    uvloop = None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(command: list[str], cwd: Path, env: dict, port: int, log: Path) -> subprocess.Popen:
    """A server, once GET /health answers."""
    with log.open("w") as output:
        server = subprocess.Popen(command, cwd=cwd, env=env, stdout=output, stderr=output)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"{' '.join(command)} did not start:\n{log.read_text()[-3000:]}")


def server_cpu(server: subprocess.Popen) -> float:
    """CPU seconds of the server and every process it started."""
    main = psutil.Process(server.pid)
    times = [process.cpu_times() for process in [main, *main.children(recursive=True)]]
    return sum(t.user + t.system for t in times)


async def load(port: int, requests: list[bytes], count: int, level: int) -> dict:
    """`count` requests from `level` keep-alive connections at once, each sending its next
    request once it has the last answer: latencies, and each answer with its request's index."""
    latencies, answers = [], []
    turns = iter(range(count))

    async def client():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for turn in turns:
            began = time.perf_counter()
            writer.write(requests[turn % len(requests)])
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])
            body = await reader.readexactly(length)
            latencies.append(time.perf_counter() - began)
            answers.append((turn, int(head[9:12]), body))
        writer.close()

    began = time.perf_counter()
    await asyncio.gather(*[client() for _ in range(level)])
    return {"wall": time.perf_counter() - began, "latencies": latencies, "answers": answers}


def wrong_answers(answers: list[tuple[int, int, bytes]], expected: list[list] | None) -> list:
    """The answers that are not 200 with the classes the request gets in-process (any 200 where
    `expected` is None: the floor's constant)."""
    wrong = []
    for turn, status, body in answers:
        if status != 200:
            wrong.append(body[:200])
        elif expected is not None:
            classes = [p["class"] for p in json.loads(body)["predictions"]]
            if classes != expected[turn % len(expected)]:
                wrong.append(body[:200])
    return wrong


def measure(server, port: int, requests, expected, args) -> list[dict]:
    results = []
    for level in args.levels:
        run_load = asyncio.run if uvloop is None else uvloop.run
        run_load(load(port, requests, min(300, args.requests), level))  # warm-up
        cpu, client = server_cpu(server), time.process_time()
        load_before = os.getloadavg()[0]
        measured = run_load(load(port, requests, args.requests, level))
        cpu, client = server_cpu(server) - cpu, time.process_time() - client
        latencies = measured["latencies"]
        wrong = wrong_answers(measured["answers"], expected)
        results.append(
            {
                "concurrency": level,
                "samples_per_s": args.requests * args.samples_per_request / measured["wall"],
                "p50_ms": 1000 * statistics.median(latencies),
                "p99_ms": 1000 * float(np.percentile(latencies, 99)),
                "server_cpu_us": 1e6 * cpu / args.requests,
                "client_cpu_us": 1e6 * client / args.requests,
                "load_average": [load_before, os.getloadavg()[0]],
                "errors": len(wrong),
                "first_errors": [answer.decode(errors="replace") for answer in wrong[:3]],
            }
        )
        print(variant_line(results[-1]), flush=True)
    return results


def medians(rounds: list[list[dict]]) -> list[dict]:
    """Each concurrency's figures over the rounds of one server: medians, with the errors summed,
    the load averages' range and every round's figures."""
    cells = []
    for same in zip(*rounds, strict=True):
        cell = {key: statistics.median(r[key] for r in same) for key in FIGURES}
        loads = [load for r in same for load in r["load_average"]]
        cells.append(
            same[0]
            | cell
            | {
                "errors": sum(r["errors"] for r in same),
                "first_errors": [error for r in same for error in r["first_errors"]][:3],
                "load_average": [min(loads), max(loads)],
                "rounds": [{key: r[key] for key in FIGURES} for r in same],
            }
        )
    return cells


def variant_line(result: dict) -> str:
    return ", ".join(
        f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
        for key, value in result.items()
        if key not in ("first_errors", "load_average")
    )


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="per variant and concurrency")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32], help="concurrencies")
    parser.add_argument("--samples-per-request", type=int, default=1, help="samples in each")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="server processes, each in turn"
    )
    parser.add_argument("--rounds", type=int, default=3, help="of every server, interleaved")
    parser.add_argument("--export", help="an export.py folder to serve instead of a new one")
    parser.add_argument(
        "--texts", help="for a text model's --export: a CSV whose text column the requests send"
    )
    parser.add_argument(
        "--variants", nargs="+", default=VARIANTS, choices=VARIANTS + EXTRA_VARIANTS
    )
    add_arguments(parser)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not args.threads:
        args.threads = 1  # onnxruntime threads per worker, as serve.yaml's default
    project = setup(args)
    env = project_env(project, EXPORT="", THREADS=str(args.threads), TEXTS=args.texts or "")

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as scratch:
        scratch = Path(scratch)
        export_dir = (
            Path(args.export).resolve() if args.export else train_and_export(project, scratch, env)
        )
        env["EXPORT"] = str(export_dir)
        script = python(str(HERE / "serve_baselines.py"), str(export_dir), str(args.requests))
        baselines = subprocess.run(
            [*script, *(str(level * args.samples_per_request) for level in args.levels)],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        limit = json.loads(baselines.stdout)
        bodies = request_bodies(limit["samples"], limit["classes"], args.samples_per_request)
        requests = [http_request(body) for body, _ in bodies]
        expected = [classes for _, classes in bodies]
        for result, level in zip(limit["in_process"], args.levels, strict=True):
            result["concurrency"] = level  # the batch that `level` requests make
        results = {"in_process": limit["in_process"]} if "in_process" in args.variants else {}
        servers = [
            (name, workers)
            for workers in args.workers
            for name in args.variants
            if name != "in_process" and (workers == 1 or name not in EXTRA_VARIANTS)
        ]
        rounds: dict[str, list] = {f"{name}/{workers}": [] for name, workers in servers}
        for round_ in range(args.rounds):
            turn = round_ % len(servers)
            for name, workers in servers[turn:] + servers[:turn]:
                port, folder = free_port(), scratch / f"round-{round_ + 1}"  # a run folder each
                command = server_command(name, export_dir, workers, port, args.threads, folder)
                print(
                    f"round {round_ + 1}, {name}, {workers} worker(s): {' '.join(command[1:])}",
                    flush=True,
                )
                log = folder / f"{name}-{workers}.log"
                folder.mkdir(exist_ok=True)
                server = start(command, project, env, port, log)
                try:
                    unchecked = name == "asgi_constant" or name in EXTRA_VARIANTS
                    checked = None if unchecked else expected
                    measured = measure(server, port, requests, checked, args)
                    rounds[f"{name}/{workers}"].append(measured)
                finally:
                    stop(server)
        results |= {key: medians(runs) for key, runs in rounds.items()}

    rows = [
        [
            name,
            r["concurrency"],
            r["samples_per_s"],
            r["p50_ms"],
            r["p99_ms"],
            round(r.get("server_cpu_us", 0)),
            r.get("errors", 0),
        ]
        for name, runs in results.items()
        for r in runs
    ]
    goals = goals_of(results, args)
    for line in goals["lines"]:
        print(line)
    size = args.samples_per_request
    report(
        "serve_load" if size == 1 else f"serve_load_{size}_per_request",
        f"Serving over HTTP, {args.requests} requests of {size} sample(s) per cell, "
        f"{args.threads} onnxruntime thread(s) per worker; variant/worker processes",
        ["variant", "concurrency", "samples/s", "p50 ms", "p99 ms", "server CPU us/req", "errors"],
        rows,
        {"results": results, "goals": goals, "args": vars(args)},
    )


def server_command(name: str, export_dir: Path, workers: int, port: int, threads: int, scratch):
    if name.startswith("serve"):
        batching = ["max_batch_size=1"] if name == "serve_unbatched" else []
        script = ["serve.py"]
        if name == "serve_model_free":
            script = ["-c", "import serve_baselines; serve_baselines.serve_without_model()"]
        return python(
            *script,
            f"model={export_dir}",
            f"workers={workers}",
            f"threads={threads}",
            "log_level=error",
            *batching,
            f"port={port}",
            f"hydra.run.dir={scratch / f'{name}-{workers}'}",
        )
    app = ["--factory", "serve_baselines:create_app"]
    if name == "asgi_constant":
        app = ["serve_baselines:constant_app", "--lifespan", "off"]
    return python(
        "-m",
        "uvicorn",
        *app,
        "--workers",
        str(workers),
        "--log-level",
        "error",
        "--no-access-log",
        "--port",
        str(port),
    )


def http_request(body: bytes) -> bytes:
    head = (
        "POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def request_bodies(samples: list, classes: list, size: int) -> list[tuple[bytes, list]]:
    """JSON bodies of `size` samples each, with the classes they get in-process."""
    return [
        (
            json.dumps({"inputs": samples[start : start + size]}).encode(),
            classes[start : start + size],
        )
        for start in range(0, len(samples) - size + 1, size)
    ]


def goals_of(results: dict, args) -> dict:
    """The goals, where the run measured what they compare, with one server process; and how
    each server scales from its first number of processes to the others."""
    at = {name: {r["concurrency"]: r for r in runs} for name, runs in results.items()}
    top, one, lines, goals = max(args.levels), args.workers[0], [], {}
    serve = at.get(f"serve/{one}", {})

    def ratio(key: str, other: str, goal: str) -> None:
        if top in serve and top in at.get(other, {}):
            goals[key] = value = serve[top]["samples_per_s"] / at[other][top]["samples_per_s"]
            lines.append(f"goal: serve / {other} at {top} = {value:.2f} ({goal})")

    if args.samples_per_request == 1:
        ratio("serve_over_floor", f"asgi_constant/{one}", ">= 0.5")
        ratio("serve_over_fastapi", f"fastapi_def/{one}", ">= 4")
        if top in serve:
            goals["serve_cpu_us"] = cpu = serve[top]["server_cpu_us"]
            lines.append(f"goal: serve's CPU per request at {top} = {cpu:.0f} us (<= 100)")
        if 1 in serve:
            goals["serve_p99_at_1_ms"] = p99 = serve[1]["p99_ms"]
            lines.append(f"goal: serve's p99 at 1 = {p99:.2f} ms (<= 2)")
    else:
        ratio("serve_over_in_process", "in_process", ">= 0.5")
    for name in {name.split("/")[0] for name in at if "/" in name}:
        first = at.get(f"{name}/{one}", {})
        for workers in args.workers[1:]:
            more = at.get(f"{name}/{workers}", {})
            if top in first and top in more:
                value = more[top]["samples_per_s"] / first[top]["samples_per_s"]
                goals[f"{name}_{workers}_over_{one}_workers"] = value
                lines.append(
                    f"scaling: {name} at {top}, {workers} / {one} processes = {value:.2f}"
                )
    return {"lines": lines, **goals}


if __name__ == "__main__":
    sys.exit(main())
