"""The replicas' SQL: rows are found and listed by the worker's id."""

from __future__ import annotations

from vigil.platform.control.db import NamedRepository
from vigil.platform.control.replicas.tables import Replica


class ReplicaRepository(NamedRepository[Replica]):
    row_type = Replica
    name_column = Replica.id
