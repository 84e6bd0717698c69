"""``idcontrol compile``: build the compiled kernels into numba's on-disk cache before the first run.

The per-tick kernels are compiled for their declared signatures when their module is imported, and cached on disk
(beside the sources, or under ``NUMBA_CACHE_DIR``). On a fresh install the first import compiles all of them,
minutes on one core, and a daemon's first start (a new container, a CI machine) pays it. This command compiles them
in parallel: each module that uses numba is imported in a worker process as soon as every such module it imports
(directly or through others) is done, so that it loads those from the cache instead of compiling them again.
Kernels without declared signatures compile on their first call, as before.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import os
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

PACKAGE = "idcontrol"
_USES_NUMBA = re.compile(r"^(import numba|from numba)", re.MULTILINE)  # at the top level
#: a jit decorator whose first argument is positional (a signature), not a keyword or nothing
_SIGNATURE_FIRST = re.compile(r"@[\w.]*jit\(\s*(?![A-Za-z_]\w*\s*=)[^\s)]")


@dataclass(frozen=True)
class Compiled:
    """One module imported by a worker: seconds it took, and why it failed ('' when it did not)."""

    module: str
    seconds: float
    error: str = ""


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package under ``root`` (its folder), by dotted name."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in it (static: its AST). ``import a.b.c`` and
    ``from a.b import c`` (c a module) count as a.b.c alone: :func:`_import` stubs the packages between; ``from
    a.b import x`` (x a name) counts as the package a.b itself, whose ``__init__`` then runs."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _packages(root: Path) -> dict[str, Path]:
    """The package and its subpackages (folders with an ``__init__.py``), by dotted name."""
    return {name: path.parent for name, path in _modules(root).items() if path.name == "__init__.py"}


def kernel_modules(root: Path | None = None) -> dict[str, set[str]]:
    """The package's modules that use numba, each with the numba-using modules it needs first (transitively,
    through modules that do not use numba, and through a package's ``__init__`` only where a name is imported
    from it)."""
    root = root or Path(__file__).resolve().parents[1]
    paths = _modules(root)
    known = set(paths)
    direct = {name: _imports(name, path, known) for name, path in paths.items()}
    numba = {name for name, path in paths.items() if _USES_NUMBA.search(path.read_text())}
    out = {}
    for name in sorted(numba):
        out[name] = _closure(name, direct) & numba
    return out


def _closure(name: str, direct: dict[str, set[str]]) -> set[str]:
    seen, stack = set(), list(direct[name])
    while stack:
        dep = stack.pop()
        if dep in seen or dep == name:
            continue
        seen.add(dep)
        stack.extend(direct.get(dep, ()))
    return seen


def _critical_paths(needs: dict[str, set[str]], cost: dict[str, float]) -> dict[str, float]:
    """Per module, its cost plus the costliest chain of modules that wait for it (source size stands for
    compile time: the largest kernels' modules compile longest)."""
    out: dict[str, float] = {}

    def longest(module: str) -> float:
        if module not in out:
            waiting = [m for m, deps in needs.items() if module in deps]
            out[module] = cost[module] + max((longest(m) for m in waiting), default=0.0)
        return out[module]

    for module in needs:
        longest(module)
    return out


def _import(module: str, real_packages: frozenset[str]) -> Compiled:
    """Worker (a fresh process per module): import ``module`` (compiling what the cache lacks), the package
    ``__init__`` files it does not need replaced by empty packages, so that it imports only its own needs."""
    import types

    start = time.perf_counter()
    root = Path(__file__).resolve().parents[1]
    for name, folder in _packages(root).items():
        if name not in real_packages and name != module and name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__path__ = [str(folder)]
            sys.modules[name] = stub
    try:
        importlib.import_module(module)
    except Exception as e:  # reported per module; the others still compile
        return Compiled(module, time.perf_counter() - start, f"{type(e).__name__}: {e}")
    return Compiled(module, time.perf_counter() - start)


def compile_all(jobs: int | None = None, report: Callable[[Compiled, int, int], None] | None = None,
                only: set[str] | None = None) -> list[Compiled]:  # fmt: skip
    """Import every numba-using module of the package (or those of ``only`` and what they need) in ``jobs`` worker
    processes (default: the CPUs this process may run on), each once the modules it needs are done;
    ``report(result, done, total)`` after each."""
    root = Path(__file__).resolve().parents[1]
    paths = _modules(root)
    direct = {name: _imports(name, path, set(paths)) for name, path in paths.items()}
    packages = set(_packages(root))
    needs = kernel_modules(root)
    if only is not None:
        keep = set(only).union(*(needs[m] for m in only))
        needs = {m: deps for m, deps in needs.items() if m in keep}
    real = {m: frozenset(_closure(m, direct) & packages) for m in needs}  # package __init__s a module needs
    jobs = max(1, jobs or len(os.sched_getaffinity(0)))
    path = _critical_paths(needs, {m: paths[m].stat().st_size for m in needs})
    done: dict[str, Compiled] = {}
    running: dict[Future, str] = {}
    results = []
    with ProcessPoolExecutor(max_workers=jobs, max_tasks_per_child=1) as pool:
        while len(done) < len(needs):
            ready = [m for m in needs if m not in done and m not in running.values() and needs[m] <= done.keys()]
            ready.sort(key=lambda m: -path[m])  # the longest chain of work first
            for module in ready[: jobs - len(running)]:
                running[pool.submit(_import, module, real[module])] = module
            if not running:  # a cycle among the modules: import the rest in one go
                for module in [m for m in needs if m not in done]:
                    done[module] = result = _import(module, frozenset(packages))
                    results.append(result)
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                running.pop(future)
                result = future.result()
                done[result.module] = result
                results.append(result)
                if report:
                    report(result, len(done), len(needs))
    return results


def stale_modules() -> list[str]:
    """The modules whose import compiles kernels and that have no cache index at least as new as their source:
    the ones an import would compile (a first start on this machine, or an edited source). Judged by files alone,
    without importing numba (a launch pays this check: a few milliseconds). Where numba would cache elsewhere (a
    read-only install without ``NUMBA_CACHE_DIR``: its user-wide folder), nothing is judged stale."""
    root = Path(__file__).resolve().parents[1]
    out = []
    for name, path in _modules(root).items():
        if not _USES_NUMBA.search(path.read_text()) or not _compiles_at_import(path):
            continue
        folder = cache_folder(path)
        if not os.environ.get("NUMBA_CACHE_DIR") and not os.access(path.parent, os.W_OK):
            continue
        stamps = [f.stat().st_mtime for f in folder.glob(f"{path.stem}.*.nbi")] if folder.is_dir() else []
        if max(stamps, default=-1.0) < path.stat().st_mtime:
            out.append(name)
    return out


def cache_folder(source: Path) -> Path:
    """Where numba caches a source file's kernels: under ``NUMBA_CACHE_DIR`` in a folder named after the source's
    folder and the SHA-1 of its path, else ``__pycache__`` beside it (numba's layout, checked by the tests)."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    folder = source.resolve().parent
    if root:
        return Path(root) / f"{folder.name}_{hashlib.sha1(str(folder).encode()).hexdigest()}"
    return folder / "__pycache__"


def _compiles_at_import(path: Path) -> bool:
    """Whether a module declares a kernel with its signature (``@njit(SIGNATURE, cache=True)``), which its import
    compiles or loads (kernels without one compile on their first call)."""
    return _SIGNATURE_FIRST.search(path.read_text()) is not None


def ensure_compiled(stream: TextIO | None = None) -> None:
    """Compile, with progress on ``stream`` (default: the standard error at the call), when modules are missing
    from the cache: a launch's processes then load them in seconds instead of compiling them in their imports."""
    stale = stale_modules()
    if not stale:
        return
    stream = stream or sys.stderr
    print(f"idcontrol: {len(stale)} compiled module(s) are not in numba's cache (a first start on this machine, or "
          "edited sources): compiling them once, in parallel (`idcontrol compile` does it ahead)", file=stream,
          flush=True)  # fmt: skip
    start = time.perf_counter()

    def report(result: Compiled, done: int, total: int) -> None:
        status = f"FAILED: {result.error}" if result.error else f"{result.seconds:.1f} s"
        print(f"idcontrol:   [{done}/{total}] {result.module} {status}", file=stream, flush=True)

    compile_all(None, report, only=set(stale))
    print(f"idcontrol: compiled in {time.perf_counter() - start:.0f} s", file=stream, flush=True)


def main(jobs: int | None) -> int:
    """``idcontrol compile``: progress on stdout, a summary; exit 1 when a module failed to import."""
    cache = os.environ.get("NUMBA_CACHE_DIR", "beside the sources (__pycache__)")
    print(f"compiling the kernels of {PACKAGE} into numba's cache ({cache}), "
          f"{jobs or len(os.sched_getaffinity(0))} process(es)", flush=True)  # fmt: skip
    start = time.perf_counter()

    def report(result: Compiled, done: int, total: int) -> None:
        status = f"FAILED: {result.error}" if result.error else f"{result.seconds:6.1f} s"
        print(f"  [{done:2d}/{total}] {result.module:<50} {status}", flush=True)

    results = compile_all(jobs, report)
    failed = [r for r in results if r.error]
    print(f"{len(results) - len(failed)} module(s) ready, {len(failed)} failed, in {time.perf_counter() - start:.1f} s "
          f"wall ({sum(r.seconds for r in results):.1f} s in the workers)")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(None))
