"""The verl bridge: ``tether.VERL`` trains with verl's multi-GPU trainer through its V1 agent loop.

- ``algorithm``: ``VERL``, the ``Algorithm`` (datasets, config, launch); no verl import until ``fit``.
- ``config``: verl's config from its defaults, tether's settings and the user's overrides; verl's checks.
- ``rows``: one rollout's transitions → the rows verl trains on (pure).
- ``dataset``: tasks ↔ verl's parquet dataset rows.
- ``runtime``: the ``Session`` each verl agent-loop worker shares between its loops.
- ``pool``: the model backend over verl's vLLM servers.
- ``agent_loop`` / ``launch``: the parts that import verl (its agent loop class, its task runner).
"""

from __future__ import annotations

from tether.algorithms.verl.algorithm import VERL, VerlServed
from tether.algorithms.verl.rows import Row, rollout_rows, row_key

__all__ = ["VERL", "Row", "VerlServed", "rollout_rows", "row_key"]
