"""Throughput and latency of serving the export over HTTP, at several concurrencies, side by side:

    python benchmarks/serve_load.py [--requests 1000] [--levels 1 8 32] [--samples-per-request 1]
                                    [--workers 1] [--export DIR] [--threads 1] [--project DIR]

Trains the default project briefly and exports it (or takes the export.py folder of an image
model, --export), then sends JSON requests of raw values (digits; random values for another
model) from an aiohttp client at each concurrency to:

- litserve_batch:   the project's serve.py, batching on (max_batch_size 32, batch_timeout 2 ms);
- litserve_single:  serve.py with max_batch_size=1;
- fastapi_def:      the FastAPI app a user would write instead, a `def` endpoint under uvicorn with
                    as many workers (serve_baselines.py);
- in_process:       the limit, onnxruntime called in one process on the batches that C requests
                    make, from raw values to predictions, with no HTTP (serve_baselines.py).

Every answer is checked against in-process predictions. The client runs on the same machine and
takes its share of the cores; the server's CPU per request (all its processes, psutil) is steadier
than throughput on a busy machine. Goals on 2 cores: batching at concurrency 32 at least half the
in-process throughput and 1.5x the FastAPI app; p99 at concurrency 1 under 10 ms.
"""

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import numpy as np
import psutil
from common import HERE, add_arguments, project_env, python, report, run, setup

VARIANTS = ["litserve_batch", "litserve_single", "fastapi_def", "in_process"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def export(project: Path, scratch: Path, env: dict) -> Path:
    """A brief training run of the default project, exported to ONNX."""
    train_dir, export_dir = scratch / "train", scratch / "export"
    overrides = ["trainer.max_epochs=3", "logger=csv", "test=false", f"hydra.run.dir={train_dir}"]
    run(python("train.py", *overrides), project, env)
    best = train_dir / "checkpoints" / "best.ckpt"
    run(
        python("export.py", f"ckpt_path={best}", "formats=[onnx]", f"hydra.run.dir={export_dir}"),
        project,
        env,
    )
    return export_dir


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


async def load(url: str, bodies: list[tuple[bytes, list]], count: int, level: int) -> dict:
    """`count` requests from `level` clients at once: latencies, and the answers that were not
    the expected classes."""
    latencies, wrong = [], []
    turns = iter(range(count))
    connector = aiohttp.TCPConnector(limit=level)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client():
            for turn in turns:
                body, expected = bodies[turn % len(bodies)]
                began = time.perf_counter()
                headers = {"Content-Type": "application/json"}
                async with session.post(url, data=body, headers=headers) as response:
                    answer = await response.read()
                latencies.append(time.perf_counter() - began)
                if (
                    response.status != 200
                    or [p["class"] for p in json.loads(answer)["predictions"]] != expected
                ):
                    wrong.append(answer[:200])

        began = time.perf_counter()
        await asyncio.gather(*[client() for _ in range(level)])
        wall = time.perf_counter() - began
    return {"wall": wall, "latencies": latencies, "wrong": wrong}


def measure(server, port: int, bodies, args) -> list[dict]:
    url = f"http://127.0.0.1:{port}/predict"
    results = []
    for level in args.levels:
        asyncio.run(load(url, bodies, min(200, args.requests), level))  # warm-up
        cpu, client = server_cpu(server), time.process_time()
        measured = asyncio.run(load(url, bodies, args.requests, level))
        cpu, client = server_cpu(server) - cpu, time.process_time() - client
        latencies = measured["latencies"]
        results.append(
            {
                "concurrency": level,
                "samples_per_s": args.requests * args.samples_per_request / measured["wall"],
                "p50_ms": 1000 * statistics.median(latencies),
                "p99_ms": 1000 * float(np.percentile(latencies, 99)),
                "server_cpu_us": 1e6 * cpu / args.requests,
                "client_cpu_us": 1e6 * client / args.requests,
                "errors": len(measured["wrong"]),
                "first_errors": [
                    answer.decode(errors="replace") for answer in measured["wrong"][:3]
                ],
            }
        )
        print(variant_line(results[-1]), flush=True)
    return results


def variant_line(result: dict) -> str:
    return ", ".join(
        f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
        for key, value in result.items()
        if key != "first_errors"
    )


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="per variant and concurrency")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32], help="concurrencies")
    parser.add_argument("--samples-per-request", type=int, default=1, help="samples in each")
    parser.add_argument("--workers", type=int, default=1, help="server workers (processes)")
    parser.add_argument("--export", help="an export.py folder to serve instead of a new one")
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    add_arguments(parser)
    args = parser.parse_args()
    if not args.threads:
        args.threads = 1  # onnxruntime threads per worker, as serve.yaml's default
    project = setup(args)
    env = project_env(project, EXPORT="", THREADS=str(args.threads))

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as scratch:
        scratch = Path(scratch)
        export_dir = Path(args.export).resolve() if args.export else export(project, scratch, env)
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
        for result, level in zip(limit["in_process"], args.levels, strict=True):
            result["concurrency"] = level  # the batch that `level` requests make
        common = [f"workers={args.workers}", f"threads={args.threads}", "log_level=error"]
        commands = {
            "litserve_batch": python("serve.py", f"model={export_dir}", *common),
            "litserve_single": python(
                "serve.py", f"model={export_dir}", "max_batch_size=1", *common
            ),
            "fastapi_def": python(
                "-m",
                "uvicorn",
                "--factory",
                "serve_baselines:create_app",
                "--workers",
                str(args.workers),
                "--log-level",
                "error",
                "--no-access-log",
            ),
        }
        results = {"in_process": limit["in_process"]} if "in_process" in args.variants else {}
        for name in [variant for variant in args.variants if variant in commands]:
            port = free_port()
            command = commands[name] + (
                ["--port", str(port)]
                if name == "fastapi_def"
                else [f"port={port}", f"hydra.run.dir={scratch / name}"]
            )
            print(f"{name}: {' '.join(command[1:])}", flush=True)
            server = start(command, project, env, port, scratch / f"{name}.log")
            try:
                results[name] = measure(server, port, bodies, args)
            finally:
                stop(server)

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
    goals = goals_of(results, args.levels)
    for line in goals["lines"]:
        print(line)
    size = args.samples_per_request
    report(
        "serve_load" if size == 1 else f"serve_load_{size}_per_request",
        f"Serving over HTTP, {args.requests} requests of {size} sample(s) per cell, "
        f"{args.workers} worker(s), {args.threads} onnxruntime thread(s) each",
        ["variant", "concurrency", "samples/s", "p50 ms", "p99 ms", "server CPU us/req", "errors"],
        rows,
        {"results": results, "goals": goals, "args": vars(args)},
    )


def request_bodies(samples: list, classes: list, size: int) -> list[tuple[bytes, list]]:
    """JSON bodies of `size` samples each, with the classes they get in-process."""
    return [
        (
            json.dumps({"inputs": samples[start : start + size]}).encode(),
            classes[start : start + size],
        )
        for start in range(0, len(samples) - size + 1, size)
    ]


def goals_of(results: dict, levels: list[int]) -> dict:
    """The three goals, where the run measured what they compare."""
    at = {name: {r["concurrency"]: r for r in runs} for name, runs in results.items()}
    top, lines, goals = max(levels), [], {}
    batch = at.get("litserve_batch", {})
    if top in batch and top in at.get("in_process", {}):
        goals["batch_over_in_process"] = ratio = (
            batch[top]["samples_per_s"] / at["in_process"][top]["samples_per_s"]
        )
        lines.append(f"goal: batching at {top} / in-process at {top} = {ratio:.3f} (>= 0.5)")
    if top in batch and top in at.get("fastapi_def", {}):
        goals["batch_over_fastapi"] = ratio = (
            batch[top]["samples_per_s"] / at["fastapi_def"][top]["samples_per_s"]
        )
        lines.append(f"goal: batching at {top} / FastAPI at {top} = {ratio:.2f} (>= 1.5)")
    if 1 in batch:
        goals["batch_p99_at_1_ms"] = p99 = batch[1]["p99_ms"]
        lines.append(f"goal: batching p99 at 1 = {p99:.2f} ms (< 10)")
    return {"lines": lines, **goals}


if __name__ == "__main__":
    sys.exit(main())
