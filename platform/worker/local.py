"""`python -m vigil.platform.worker.local NAME`: a worker that `vigil serve` starts on its
own machine (worker/supervisor.py). Its settings are read whole from standard input
(worker/handoff.py); its name, the one argument, is its worker id, so that `ps` tells the
workers apart."""

from __future__ import annotations

import sys
from dataclasses import replace

from vigil.platform.worker.handoff import decode
from vigil.platform.worker.server import run_worker

if __name__ == "__main__":
    run_worker(replace(decode(sys.stdin.buffer.read()), worker_id=sys.argv[1]))
