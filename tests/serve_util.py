"""Start a real OpenAI-compatible server (`transformers serve`) on a local model folder for tests.

The server runs as a subprocess on 127.0.0.1 with a free port, offline (``HF_HUB_OFFLINE=1``),
pinned to the model so it is loaded before the first request; `transformers_server` waits for
``/health`` with a bounded poll and stops the process it started when the block ends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass
class LocalServer:
    base_url: str  # ends in /v1, as the OpenAI client expects
    model: str
    log_path: Path

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def free_port() -> int:
    """A port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def transformers_server(
    model_path: str | Path, log_path: Path, *, startup_timeout_s: float = 180.0
) -> Iterator[LocalServer]:
    """Run ``transformers serve MODEL`` until the block ends; raise with the server log if it does not come up."""
    port = free_port()
    model = str(model_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", model]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--default-seed", "0"]
    server = LocalServer(base_url=f"http://127.0.0.1:{port}/v1", model=model, log_path=log_path)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited with code {proc.returncode}:\n{server.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"transformers serve not healthy after {startup_timeout_s:g} s:\n{server.log_tail()}"
                )
            time.sleep(0.25)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
