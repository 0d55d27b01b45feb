"""The console charts' last 15 minutes, kept across a restart in a small file in the
data directory (`DATA_DIR/console-series.json`).

Why a file and not the database: the points are this gateway's own (its queue, its
requests, one a second), gone after 15 minutes, and each gateway draws its own; the
database keeps what the gateways share, and the SLO buckets it could offer hold the SLIs
only, by the minute, without the queue, the KV cache or the refusals. A file is written
without a schema change, from a thread, and a lost one costs only the charts' past.

It is written every SAVE_EVERY_S by the live sampler's loop and when the gateway stops
(atomically: a crash leaves the previous file), and read when it starts: points older
than the charts' window are dropped then.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import msgspec

from vigil.platform.telemetry.deployments import MAX_POINTS, DeploymentPoint, DeploymentSeries

log = logging.getLogger(__name__)

FILE_NAME = "console-series.json"
SAVE_EVERY_S = 30  # at most this much of the charts' past is lost to a crash
WINDOW_S = MAX_POINTS  # the charts' 15 minutes, one point a second

_decoder = msgspec.json.Decoder(dict[str, list[DeploymentPoint]])


class SeriesFile:
    def __init__(self, path: Path, series: DeploymentSeries) -> None:
        self.path = path
        self.series = series

    def save(self) -> None:
        body = msgspec.json.encode(self.series.history())
        tmp = self.path.with_suffix(".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(body)
            os.replace(tmp, self.path)
        except OSError as exc:  # a read-only data dir: the charts just start empty
            log.warning("could not save the console's chart history to %s: %s", self.path, exc)

    def load(self, now_wall_s: float | None = None) -> int:
        """The points of the last WINDOW_S restored; how many."""
        if not self.path.exists():
            return 0
        try:
            saved = _decoder.decode(self.path.read_bytes())
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("ignoring the console's chart history in %s: %s", self.path, exc)
            return 0
        oldest = (time.time() if now_wall_s is None else now_wall_s) - WINDOW_S
        restored = 0
        for deployment, points in saved.items():
            recent = [p for p in points if p.wall_ts >= oldest]
            if recent:
                self.series.restore(deployment, recent)
                restored += len(recent)
        return restored
