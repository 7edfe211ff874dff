"""A real server, `python serve.py`, in a subprocess on a free port of 127.0.0.1, and a real
HTTP client for it (aiohttp), as the serving tests use them."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

import aiohttp
import psutil
from conftest import start_cli


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Answer(NamedTuple):
    status: int
    text: str

    def json(self):
        return json.loads(self.text)


class Upload(NamedTuple):
    """An image file in a multipart form, as `curl -F file=@digit.png` sends it."""

    data: bytes
    name: str = "digit.png"
    field: str = "file"

    def form(self) -> aiohttp.FormData:  # a new one each time: aiohttp sends a form only once
        form = aiohttp.FormData()
        form.add_field(self.field, self.data, filename=self.name, content_type="image/png")
        return form


async def send(session: aiohttp.ClientSession, method: str, url: str, **options) -> Answer:
    if isinstance(options.get("data"), Upload):
        options["data"] = options["data"].form()
    async with session.request(method, url, **options) as response:
        return Answer(response.status, await response.text())


def call(method: str, url: str, **options) -> Answer:
    """One request, from a session of its own."""

    async def one():
        async with aiohttp.ClientSession() as session:
            return await send(session, method, url, **options)

    return asyncio.run(one())


class Server:
    """`python serve.py model=<model> <overrides>`; its output goes to `folder`/server.log and
    its run directory is `folder`/run. Stopped with SIGTERM when the block ends, and every
    process it started is checked to be gone."""

    def __init__(self, model: Path, folder: Path, *overrides: str, env=None, **popen):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "server.log"
        with self.log.open("w") as log:
            self.process = start_cli(
                "serve.py",
                f"model={model}",
                f"port={self.port}",
                f"hydra.run.dir={folder / 'run'}",
                *overrides,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                **popen,
            )
        self.processes: list[psutil.Process] = []

    def output(self) -> str:
        return self.log.read_text()

    def wait_ready(self, timeout: float = 180) -> "Server":
        """Once GET /health answers 200: a server process has loaded the model. Until then the
        port refuses connections (one process), or holds them (several, on uvicorn's socket)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"serve.py exited ({self.process.returncode}):\n{self.output()}"
                )
            try:  # urllib: this may run inside Playwright's event loop, where aiohttp cannot
                with urllib.request.urlopen(f"{self.url}/health", timeout=5):
                    self.processes = self.tree()
                    return self
            except OSError:  # refused, or no answer within the timeout
                pass
            time.sleep(0.1)
        raise AssertionError(f"serve.py not ready in {timeout} s:\n{self.output()}")

    def tree(self) -> list[psutil.Process]:
        main = psutil.Process(self.process.pid)
        return [main, *main.children(recursive=True)]

    def memory(self) -> int:
        """Resident bytes of every process of the server."""
        return sum(process.memory_info().rss for process in self.tree())

    def stop(self, signum: int = signal.SIGTERM, group: bool = False) -> tuple[int, list]:
        """Sends `signum` to the server (`group`: to its whole process group, as Ctrl-C in a
        terminal does); its exit status and the processes it leaves alive, which are killed."""
        if not self.processes and self.process.poll() is None:  # stopped before it was ready
            self.processes = self.tree()
        if group:
            os.killpg(self.process.pid, signum)
        else:
            self.process.send_signal(signum)
        try:
            status = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            status = None
        _, alive = psutil.wait_procs(self.processes, timeout=30)
        for process in alive:
            process.kill()
        return status, alive

    def __enter__(self) -> "Server":
        try:
            return self.wait_ready()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc_info) -> None:
        if self.process.poll() is None:
            status, alive = self.stop()
            assert not alive, f"left running: {alive}\n{self.output()}"
        for process in self.processes:  # a test that stopped it itself left none
            if process.is_running():
                process.kill()
