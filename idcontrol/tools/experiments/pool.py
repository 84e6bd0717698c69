"""Run an experiment's matrix: each run in this process, or ``jobs`` at a time in fresh processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

Spec = TypeVar("Spec")


def run_all(
    specs: Sequence[Spec],
    run: Callable[[Spec], dict[str, Any]],
    *,
    jobs: int = 1,
    progress: Callable[[str], None] = print,
    name: Callable[[Spec], str] = str,
    describe: Callable[[dict[str, Any]], str] = str,
) -> list[dict[str, Any]]:
    """``run`` on every spec (a picklable top-level function when ``jobs`` > 1: each process is spawned), a line
    through ``progress`` as each finishes (``name`` of the spec, ``describe`` of its result); results in ``specs``
    order."""
    results: dict[int, dict[str, Any]] = {}
    for done, (i, result) in enumerate(_results(specs, run, jobs), start=1):
        results[i] = result
        progress(f"[{done}/{len(specs)}] {name(specs[i])}: {describe(result)}")
    return [results[i] for i in range(len(specs))]


def _results(
    specs: Sequence[Spec], run: Callable[[Spec], dict[str, Any]], jobs: int
) -> Iterator[tuple[int, dict[str, Any]]]:
    if jobs <= 1:
        for i, spec in enumerate(specs):
            yield i, run(spec)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run, spec): i for i, spec in enumerate(specs)}
        for future in as_completed(futures):
            yield futures[future], future.result()
