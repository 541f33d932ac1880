"""A Dask nanny preload for workers started by hand: ``dask worker tcp://SCHEDULER:8786 --preload-nanny
engine.training.dask_nanny`` (as ``docker-compose.yml``'s ``worker`` service runs them) starts its worker process
without ``MALLOC_TRIM_THRESHOLD_``, as ``--cluster local:N`` does (``engine.training.cluster.WORKER_ENVIRON``: with
the variable a training ran 1.3x slower per seed, docs/results/cluster.md).

The nanny imports its preloads before it reads ``distributed.nanny.pre-spawn-environ`` and spawns the worker
(distributed's ``Nanny.__init__``), so setting Dask's configuration at import is early enough; a value of None
removes Dask's default. A ``MALLOC_TRIM_THRESHOLD_`` in the environment ``dask worker`` itself starts with is
still inherited by the worker (an operator's own choice). Importing this module changes the process's Dask
configuration: only a nanny should.
"""

from __future__ import annotations

import dask

from engine.training.cluster import WORKER_ENVIRON

dask.config.set(WORKER_ENVIRON)
