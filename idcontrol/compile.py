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
import contextlib
import hashlib
import importlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from idcontrol.errors import IdControlError

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


def _imports(name: str, text: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in it (static: its AST). ``import a.b.c`` and
    ``from a.b import c`` (c a module) count as a.b.c alone: :func:`_import` stubs the packages between; ``from
    a.b import x`` (x a name) counts as the package a.b itself, whose ``__init__`` then runs."""
    tree = ast.parse(text, str(path))
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


@dataclass(frozen=True)
class _Package:
    """The package's modules read once: their files, what each imports (:func:`_imports`), which use numba."""

    paths: dict[str, Path]
    imports: dict[str, set[str]]
    numba: frozenset[str]

    @classmethod
    def read(cls, root: Path | None = None) -> _Package:
        paths = _modules(root or Path(__file__).resolve().parent)
        texts = {name: path.read_text() for name, path in paths.items()}
        imports = {name: _imports(name, texts[name], paths[name], set(paths)) for name in paths}
        return cls(paths, imports, frozenset(n for n, text in texts.items() if _USES_NUMBA.search(text)))

    def closure(self, name: str) -> set[str]:
        """Every module ``name`` imports, directly or through others."""
        seen, stack = set(), list(self.imports[name])
        while stack:
            dep = stack.pop()
            if dep in seen or dep == name:
                continue
            seen.add(dep)
            stack.extend(self.imports.get(dep, ()))
        return seen

    def kernels(self) -> dict[str, set[str]]:
        """The numba-using modules, each with the numba-using modules it imports (directly or through others)."""
        return {name: self.closure(name) & self.numba for name in sorted(self.numba)}

    def stubs(self, module: str) -> dict[str, str]:
        """The packages (name -> folder) whose ``__init__`` importing ``module`` does not need."""
        needed = self.closure(module) | {module}
        return {
            name: str(path.parent)
            for name, path in self.paths.items()
            if path.name == "__init__.py" and name not in needed
        }


def kernel_modules(root: Path | None = None) -> dict[str, set[str]]:
    """The package's modules that use numba, each with the numba-using modules it needs first (transitively,
    through modules that do not use numba, and through a package's ``__init__`` only where a name is imported
    from it)."""
    return _Package.read(root).kernels()


def _import(module: str, stubs: dict[str, str]) -> Compiled:
    """Worker (a fresh process per module): import ``module`` (compiling what the cache lacks), with the packages
    of ``stubs`` (name -> folder: those whose ``__init__`` it does not need) empty, so that it imports only its own
    needs."""
    import types

    start = time.perf_counter()
    for name, folder in stubs.items():
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__path__ = [folder]
            sys.modules[name] = stub
    try:
        imported = importlib.import_module(module)
    except Exception as e:  # reported per module; the others still compile
        return Compiled(module, time.perf_counter() - start, f"{type(e).__name__}: {e}")
    _mark_current(Path(imported.__file__))
    return Compiled(module, time.perf_counter() - start)


def _mark_current(source: Path) -> None:
    """Date the cache indexes of ``source``'s kernels now, once its import loaded or compiled them: numba judges an
    index by the source's stamp recorded in it, :func:`stale_modules` by the files' times alone, and a source whose
    time moved while its text did not (a checkout, ``git stash``) would otherwise look stale at every start while
    numba loads its kernels from the cache and never rewrites the index."""
    folder = cache_folder(source)
    if folder.is_dir():
        for index in folder.glob(f"{source.stem}.*.nbi"):
            with contextlib.suppress(OSError):
                os.utime(index)


def _cpus() -> int:
    """The CPUs this process may run on: the default number of workers."""
    return len(os.sched_getaffinity(0))


def compile_all(
    jobs: int | None = None, report: Callable[[Compiled, int, int], None] | None = None, only: set[str] | None = None
) -> list[Compiled]:
    """Import every numba-using module of the package (or those of ``only`` and what they need) in ``jobs`` worker
    processes (default: :func:`_cpus`), each once the modules it needs are done;
    ``report(result, done, total)`` after each."""
    package = _Package.read()
    needs = package.kernels()
    if only is not None:
        keep = set(only).union(*(needs[m] for m in only))
        needs = {m: deps for m, deps in needs.items() if m in keep}
    waiting = {m: sum(m in deps for deps in needs.values()) for m in needs}  # how many modules wait for it
    jobs = max(1, jobs or _cpus())
    done: dict[str, Compiled] = {}
    running: dict[Future, str] = {}
    results = []
    with ProcessPoolExecutor(max_workers=jobs, max_tasks_per_child=1) as pool:
        while len(done) < len(needs):
            ready = [m for m in needs if m not in done and m not in running.values() and needs[m] <= done.keys()]
            ready.sort(key=lambda m: -waiting[m])  # the module most others wait for first
            for module in ready[: jobs - len(running)]:
                running[pool.submit(_import, module, package.stubs(module))] = module
            if not running:  # nothing ready and nothing to wait for: the rest import one another
                raise IdControlError(
                    f"the kernel modules {sorted(set(needs) - set(done))} import one another; "
                    "compile them by importing idcontrol"
                )
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                running.pop(future)
                result = future.result()
                done[result.module] = result
                results.append(result)
                if report:
                    report(result, len(done), len(needs))
    return results


#: The sources the cache was built from (module -> SHA-1 of its text), kept in the package's cache folder
SOURCES_RECORD = "idcontrol-kernel-sources.json"


def _caches_beside(folder: Path) -> bool:
    """Whether numba caches the kernels of ``folder``'s modules where :func:`cache_folder` says: under
    ``NUMBA_CACHE_DIR``, or beside the sources when the folder is writable (else in its user-wide folder)."""
    return bool(os.environ.get("NUMBA_CACHE_DIR")) or os.access(folder, os.W_OK)


def _sources_record(root: Path) -> Path:
    return cache_folder(root / "__init__.py") / SOURCES_RECORD


def invalidate_dependents(root: Path | None = None) -> list[str]:
    """Remove from numba's cache the kernels of every module that imports, directly or through others, a module
    whose text changed since the cache was last checked; returns those modules (then :func:`stale_modules`).

    numba checks a cached kernel against its own source file only: a kernel that calls a kernel of another module
    holds that callee's compiled code, and an edited callee (or an upgrade that changes it and not the caller)
    left the caller running the old code, silently (found when a change to Lemke's method did not reach the
    Coulomb LCP's solve). The texts of the package's modules are compared with the record of the last check
    (:data:`SOURCES_RECORD`, a few ms); only when one changed is the import graph read (about 0.5 s). Without a
    record, every cached kernel is removed once. An install the process may not write to (and no
    ``NUMBA_CACHE_DIR``) is left alone; a cache it fails to change is reported on stderr."""
    root = root or Path(__file__).resolve().parent
    if not _caches_beside(root):
        return []
    paths = _modules(root)
    now = {name: hashlib.sha1(path.read_bytes()).hexdigest() for name, path in paths.items()}
    record = _sources_record(root)
    try:
        before = json.loads(record.read_text())["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        before = None
    if before == now:
        return []
    changed = set(now) if before is None else {m for m in now.keys() | before.keys() if now.get(m) != before.get(m)}
    package = _Package.read(root)
    out = []
    try:
        for name in sorted(package.numba):
            if not ({name} | package.closure(name)) & changed:
                continue
            path = paths[name]
            folder = cache_folder(path)
            files = [*folder.glob(f"{path.stem}.*.nbi"), *folder.glob(f"{path.stem}.*.nbc")] if folder.is_dir() else []
            for f in files:
                f.unlink(missing_ok=True)
            if files:
                out.append(name)
        record.parent.mkdir(parents=True, exist_ok=True)
        temporary = record.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"sources": now}))
        temporary.replace(record)  # whole, for a process checking at the same time
    except OSError as e:  # a cache this process may read but not change: say so, and go on with it as it is
        print(
            f"idcontrol: warning: cannot update numba's cache ({e}); kernels whose callees changed may run their "
            "old code until it is cleared",
            file=sys.stderr,
            flush=True,
        )
    return out


def stale_modules() -> list[str]:
    """The modules whose import compiles kernels and that have no cache index at least as new as their source:
    the ones an import would compile (a first start on this machine, or an edited source). Judged by files alone,
    without importing numba (a launch pays this check: a few milliseconds). Where numba would cache elsewhere (a
    read-only install without ``NUMBA_CACHE_DIR``: its user-wide folder), nothing is judged stale."""
    root = Path(__file__).resolve().parent
    out = []
    for name, path in _modules(root).items():
        text = path.read_text()
        if not _USES_NUMBA.search(text) or _SIGNATURE_FIRST.search(text) is None:
            continue  # no kernel its import compiles (one declared with its signature; the others compile lazily)
        if not _caches_beside(path.parent):
            continue
        folder = cache_folder(path)
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


def ensure_compiled(stream: TextIO | None = None) -> None:
    """Compile, with progress on ``stream`` (default: the standard error at the call), when modules are missing
    from the cache: a launch's processes then load them in seconds instead of compiling them in their imports."""
    stream = stream or sys.stderr
    invalidated = invalidate_dependents()
    if invalidated:
        print(
            f"idcontrol: {len(invalidated)} compiled module(s) import changed sources: their cached kernels are "
            "removed",
            file=stream,
            flush=True,
        )
    stale = stale_modules()
    if not stale:
        return
    print(
        f"idcontrol: {len(stale)} compiled module(s) are not in numba's cache (a first start on this machine, or "
        "edited sources): compiling them once, in parallel (`idcontrol compile` does it ahead)",
        file=stream,
        flush=True,
    )
    start = time.perf_counter()
    compile_all(None, _reporter(stream, "idcontrol:   "), only=set(stale))
    print(f"idcontrol: compiled in {time.perf_counter() - start:.0f} s", file=stream, flush=True)


def _reporter(stream: TextIO, prefix: str) -> Callable[[Compiled, int, int], None]:
    """A line per module done: its count, name and seconds, or why it failed."""

    def report(result: Compiled, done: int, total: int) -> None:
        status = f"FAILED: {result.error}" if result.error else f"{result.seconds:6.1f} s"
        print(f"{prefix}[{done:2d}/{total}] {result.module:<50} {status}", file=stream, flush=True)

    return report


def main(jobs: int | None) -> int:
    """``idcontrol compile``: progress on stdout, a summary; exit 1 when a module failed to import."""
    cache = os.environ.get("NUMBA_CACHE_DIR", "beside the sources (__pycache__)")
    print(f"compiling the kernels of {PACKAGE} into numba's cache ({cache}), {jobs or _cpus()} process(es)", flush=True)
    start = time.perf_counter()
    invalidated = invalidate_dependents()
    if invalidated:
        print(f"  {len(invalidated)} module(s) import changed sources: their cached kernels removed", flush=True)
    results = compile_all(jobs, _reporter(sys.stdout, "  "))
    failed = [r for r in results if r.error]
    print(
        f"{len(results) - len(failed)} module(s) ready, {len(failed)} failed, in {time.perf_counter() - start:.1f} s "
        f"wall ({sum(r.seconds for r in results):.1f} s in the workers)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(None))
