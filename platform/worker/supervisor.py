"""The worker processes `vigil serve` runs on its own machine, restarted when they die.

Each is a worker in a child process (worker/local.py: its settings handed over whole on
its standard input, its name as its one argument), so a crash in an engine (or the
kernel killing it for memory) takes down one worker, not the gateway: the gateway sees
it miss heartbeats, routes around it, and this supervisor starts a new one (backing off
when one keeps dying). Once the gateway is stopping (`stopping()`, from its SIGTERM), a
worker that exits is not restarted: `kill -TERM` of the whole process group, as
container runtimes and `systemctl stop` send it, reaches the workers too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
from dataclasses import dataclass

from vigil.platform.settings import WorkerSettings
from vigil.platform.worker.handoff import encode

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 0.5
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(slots=True)
class _Child:
    worker_id: str
    process: subprocess.Popen[bytes] | None = None
    failures: int = 0


class LocalWorkers:
    def __init__(self, count: int, settings: WorkerSettings) -> None:
        """`settings`: every child's (settings.local_worker_settings); each is named
        local-N instead of its worker_id."""
        self._children = [_Child(f"local-{i}") for i in range(count)]
        self._settings = encode(settings)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pids(self) -> dict[str, int]:
        return {c.worker_id: c.process.pid for c in self._children if c.process is not None}

    def stopping(self) -> None:
        """The gateway is shutting down: from now on no worker is restarted."""
        self._stopping = True

    def start(self) -> None:
        for child in self._children:
            self._spawn(child)
        self._task = asyncio.create_task(self._watch(), name="local-workers")

    def _spawn(self, child: _Child) -> None:
        cmd = [sys.executable, "-m", "vigil.platform.worker.local", child.worker_id]
        process = subprocess.Popen(cmd, stdin=subprocess.PIPE)
        assert process.stdin is not None, "stdin=PIPE gives a pipe"
        # A few hundred bytes: the pipe's buffer takes them whole, so this never blocks. A
        # child already gone is restarted by _watch, as any that exits.
        with contextlib.suppress(BrokenPipeError), process.stdin as pipe:
            pipe.write(self._settings)
        child.process = process
        log.info("started worker %s (pid %d)", child.worker_id, process.pid)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            for child in self._children:
                if child.process is None:  # exited during shutdown
                    continue
                code = child.process.poll()
                if code is None:
                    continue
                if self._stopping:
                    log.info("worker %s exited with %s during shutdown", child.worker_id, code)
                    child.process = None
                    continue
                delay = RESTART_BACKOFF_S[min(child.failures, len(RESTART_BACKOFF_S) - 1)]
                child.failures += 1
                log.warning(
                    "worker %s exited with %s; restarting in %.0f s", child.worker_id, code, delay
                )
                child.process = None
                await asyncio.sleep(delay)
                if not self._stopping:
                    self._spawn(child)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for child in self._children:
            if child.process is not None and child.process.poll() is None:
                child.process.terminate()
        for child in self._children:
            if child.process is None:
                continue
            try:
                await asyncio.to_thread(child.process.wait, 15)
            except subprocess.TimeoutExpired:
                child.process.kill()
                await asyncio.to_thread(child.process.wait)
