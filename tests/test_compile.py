"""`idcontrol compile` and the first-start check: numba's cache layout, which modules an import would compile, and
a parallel compile that imports each module with only what it needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from numba.core.caching import _CacheLocator

from idcontrol.compile import cache_folder, invalidate_dependents, kernel_modules

ROOT = Path(__file__).resolve().parents[1] / "idcontrol"


def run(code: str, cache: Path) -> str:
    """``code`` in a fresh interpreter whose numba cache is ``cache``; its stdout."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout


def test_the_cache_folder_is_where_numba_writes(tmp_path, monkeypatch):
    """Under NUMBA_CACHE_DIR, the folder numba's locator names; without it, __pycache__ beside the source."""
    source = ROOT / "solvers" / "lemke.py"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert cache_folder(source) == tmp_path / _CacheLocator.get_suitable_cache_subpath(str(source))
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    assert cache_folder(source) == source.parent / "__pycache__"


def test_the_module_graph_is_acyclic_and_closed():
    """Every module a numba-using module needs first is itself one, and an order exists that compiles each after
    what it needs (the scheduler's premise)."""
    needs = kernel_modules()
    assert "idcontrol.solvers.lemke" in needs and "idcontrol.formulations.noslip_lcp.stages" in needs
    assert all(deps <= needs.keys() and name not in deps for name, deps in needs.items())
    done: set[str] = set()
    while len(done) < len(needs):
        ready = {m for m, deps in needs.items() if m not in done and deps <= done}
        assert ready, f"a cycle among {sorted(set(needs) - done)}"
        done |= ready
    pyramid = needs["idcontrol.formulations.two_stage_qp.pyramid_dual"]
    assert "idcontrol.formulations.noslip_lcp.stages" not in pyramid  # not through the formulations' registry


def test_a_cold_cache_is_seen_and_a_parallel_compile_fills_it(tmp_path):
    """With an empty cache every module whose import compiles is stale (lazily compiled ones never are);
    compiling formulations.certificate in two processes compiles it and what it needs (the problem record among
    them), each imported under an empty `idcontrol.formulations` package (not its __init__, which imports every
    formulation); afterwards those are no longer stale while the others still are."""
    check = "import json; from idcontrol.compile import stale_modules; print(json.dumps(stale_modules()))"
    before = json.loads(run(check, tmp_path))
    target = "idcontrol.formulations.certificate"
    assert {target, "idcontrol.solvers.lemke", "idcontrol.validation"} <= set(before)
    assert not any(m.startswith("idcontrol.sim.ess") for m in before)  # compiled on first call, not at import
    out = run(
        "from idcontrol.compile import compile_all\n"
        f"for r in compile_all(2, only={{'{target}'}}): print(r.module, repr(r.error))",
        tmp_path,
    )
    lines = sorted(out.splitlines())
    needed = ("idcontrol.arrays", "idcontrol.validation", "idcontrol.formulations.record", target)
    assert lines == sorted(f"{m} ''" for m in needed), out
    after = json.loads(run(check, tmp_path))
    assert set(after) == set(before) - {target, "idcontrol.validation", "idcontrol.formulations.record"}
    stubbed = run(
        "import sys\nfrom idcontrol.compile import _import, _Package\n"
        f"print(_import('{target}', _Package.read().stubs('{target}')).error == '', "
        "hasattr(sys.modules['idcontrol.formulations'], 'make_formulation'), "
        "'idcontrol.formulations.coulomb_lcp' in sys.modules)",
        tmp_path,
    )
    assert stubbed.split() == ["True", "False", "False"]


CALLEE = """from numba import njit


@njit("float64(float64)", cache=True)
def shift(x):
    return x + {shift}
"""
CALLER = """from numba import njit

from demo.callee import shift


@njit("float64(float64)", cache=True)
def twice_shifted(x):
    return 2.0 * shift(x)
"""
OTHER = """from numba import njit


@njit("float64(float64)", cache=True)
def halved(x):
    return 0.5 * x
"""


def test_a_kernel_whose_callee_changed_is_compiled_again(tmp_path, monkeypatch):
    """numba checks a cached kernel against its own file: after its callee's module changes, a caller loaded from
    the cache still runs the old callee. invalidate_dependents removes the cached kernels of the changed module and
    of every module that imports it (not of the others), and the caller then computes with the new callee."""
    package, cache = tmp_path / "demo", tmp_path / "cache"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "callee.py").write_text(CALLEE.format(shift=1.0))
    (package / "caller.py").write_text(CALLER)
    (package / "other.py").write_text(OTHER)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    # no bytecode files: callee.py rewritten within the second at the same size would pass Python's own .pyc check
    # (seconds and size) and run the old callee whatever numba's cache holds (a fresh CI machine did)
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "NUMBA_CACHE_DIR": str(cache),
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }

    def caller_of_one() -> float:
        code = "from demo.caller import twice_shifted; from demo.other import halved; print(twice_shifted(1.0))"
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
        return float(out.stdout)

    assert invalidate_dependents(package) == []  # the first check: nothing cached yet, the sources recorded
    assert caller_of_one() == 4.0  # compiled, and cached
    (package / "callee.py").write_text(CALLEE.format(shift=2.0))
    assert caller_of_one() == 4.0  # the stale caller: numba's own check passes it
    assert invalidate_dependents(package) == ["demo.callee", "demo.caller"]
    assert caller_of_one() == 6.0
    assert invalidate_dependents(package) == []  # nothing changed since


def test_a_cache_that_cannot_be_changed_is_reported_and_left_alone(tmp_path, monkeypatch, capsys):
    """Where numba's cache cannot be written (here NUMBA_CACHE_DIR names a file), the check says so on stderr and
    returns, and the start goes on."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(blocker))
    assert invalidate_dependents() == []
    assert "cannot update numba's cache" in capsys.readouterr().err


def test_an_import_that_loads_from_the_cache_dates_the_index_after_its_source(tmp_path):
    """A source whose time moved while its text did not (a checkout, `git stash`): numba loads its kernels from the
    cache and does not rewrite the index, so a judgement by file times alone would call the module stale at every
    start. After the compile's import the index is dated after the source."""
    package = tmp_path / "demo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = package / "other.py"
    source.write_text(OTHER)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    code = "from idcontrol.compile import _import; print(_import('demo.other', {}).error == '')"

    def compile_demo() -> None:
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
        assert out.stdout.split() == ["True"], out.stderr

    compile_demo()
    indexes = list((package / "__pycache__").glob("other.*.nbi"))
    assert indexes
    later = max(i.stat().st_mtime for i in indexes) + 1.0
    os.utime(source, (later, later))  # the same text, a time after the index's
    time.sleep(max(0.0, later - time.time()) + 0.1)
    compile_demo()
    assert min(i.stat().st_mtime for i in indexes) >= later
