"""Run independent tasks here, on a local process pool, or as Ray tasks, and hand back each result as it ends.

The same picklable, module-level function runs every task in all three cases, so a sweep gives the same
results wherever it runs (only timings differ). Ray (``pip install 'idcontrol[ray]'``):

* ``ray=None``: no Ray;
* ``ray="local"``: start a Ray instance on this machine for the run (``workers`` CPUs, every socket on
  127.0.0.1, no dashboard) and stop it afterwards;
* ``ray=ADDRESS``: connect to a running cluster (``"auto"``, ``"HOST:6379"`` or ``"ray://HOST:10001"``); every
  node needs the same idcontrol installed (see docs/sweeps.md).

Each task takes one CPU. The BLAS thread limits of this process (OPENBLAS_NUM_THREADS, ...) are passed to the
workers: a 1 kHz controller's small matrices only lose from BLAS threads, and on a loaded machine they cost
tens of milliseconds per call.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from idcontrol.errors import ConfigError

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def run_tasks(
    function: Callable[[Any], Any], tasks: Sequence[Any], *, workers: int = 1, ray: str | None = None
) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, function(tasks[index]))`` for every task, in the order they finish.

    workers : tasks at a time (a process each; 1 without Ray: one after the other in this process). With
        ``ray="local"`` the CPUs of the local Ray instance; with a cluster address, ignored (the cluster's CPUs).
    """
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an integer >= 1, got {workers!r}")
    if ray is not None:
        yield from _ray_results(function, tasks, workers, ray)
    elif workers == 1:
        for i, task in enumerate(tasks):
            yield i, function(task)
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(function, task): i for i, task in enumerate(tasks)}
            for future in as_completed(futures):
                yield futures[future], future.result()


def _ray_results(function: Callable[[Any], Any], tasks: Sequence[Any], workers: int, address: str) -> Iterator:
    local = address == "local"
    if local:
        # a single-node instance: Ray then binds and connects on 127.0.0.1 only (read when Ray is imported)
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'idcontrol[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        env = {name: os.environ[name] for name in THREAD_VARS if name in os.environ}
        options: dict[str, Any] = {"include_dashboard": False, "runtime_env": {"env_vars": env}}
        if local:
            ray.init(num_cpus=workers, **options)
        else:
            try:
                ray.init(address=address, **options)
            except ConnectionError as e:
                raise ConfigError(f"--ray {address}: no Ray cluster answers there ({e})") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(function)
        pending = {remote.remote(task): i for i, task in enumerate(tasks)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        if started_here:
            ray.shutdown()
