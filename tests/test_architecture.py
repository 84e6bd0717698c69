"""The layout's rules, checked on the code itself: imports point down, no import circles, one tick record."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from idcontrol.logs import schema

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "idcontrol"

#: From the top down: a module may import its own layer and the layers below it, never one above.
#: (docs/architecture.md explains each layer.)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("idcontrol.tools", "idcontrol.__main__"),
    ("idcontrol.ros2",),
    ("idcontrol.testing",),
    ("idcontrol.launcher", "idcontrol.processes", "idcontrol.compile"),
    ("idcontrol.daemon", "idcontrol.bridges", "idcontrol.driver", "idcontrol.client"),
    ("idcontrol.logs",),
    ("idcontrol.protocol", "idcontrol.sim", "idcontrol.realtime"),
    ("idcontrol.control",),
    ("idcontrol.settings", "idcontrol.simulators"),
    ("idcontrol.estimation",),
    ("idcontrol.reference",),
    ("idcontrol.formulations",),
    ("idcontrol.analysis",),
    ("idcontrol.solvers",),
    ("idcontrol.contacts",),
    ("idcontrol.robot", "idcontrol.security"),
    ("idcontrol.errors", "idcontrol.validation", "idcontrol.timing", "idcontrol"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(name: str, path: Path) -> set[str]:
    """Every idcontrol module ``path`` imports, at any depth of the file (lazy and TYPE_CHECKING ones too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    known = modules()
    return {m for m in out if m in known and m != name}


def layer_of(name: str) -> int:
    best, rank = -1, len(LAYERS)
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    return rank


def test_every_module_has_a_layer():
    """Each module of the package belongs to one of the layers (a new folder must be placed)."""
    unplaced = [name for name in modules() if layer_of(name) == len(LAYERS)]
    assert not unplaced


def test_imports_only_point_down():
    """No module imports from a layer above its own (tools -> testing -> launcher -> daemon/bridges -> logs ->
    protocol/sim -> control -> settings -> estimation -> reference -> formulations -> analysis -> solvers ->
    contacts -> robot -> errors)."""
    upward = []
    for name, path in modules().items():
        for target in imported(name, path):
            if layer_of(target) < layer_of(name):
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that point up:\n" + "\n".join(sorted(upward))


def test_no_import_circles():
    """No two modules import each other, directly or through others."""
    graph = {name: imported(name, path) for name, path in modules().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            # a package's __init__ re-exporting its own modules is not a circle between concepts
            if len(component) > 1 and not all(c.startswith(min(component, key=len)) for c in component):
                circles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    assert not circles


def test_the_service_never_imports_the_tools():
    """The launcher, daemon, bridges, control core and everything below import nothing from tools/ or testing/,
    and testing/ nothing from tools/."""
    tools, testing = layer_of("idcontrol.tools"), layer_of("idcontrol.testing")
    below = {n: p for n, p in modules().items() if layer_of(n) > testing}
    offending = [f"{n} -> {t}" for n, p in below.items() for t in imported(n, p) if layer_of(t) <= testing]
    assert not offending
    harness = {n: p for n, p in modules().items() if layer_of(n) == testing}
    assert harness and not [f"{n} -> {t}" for n, p in harness.items() for t in imported(n, p) if layer_of(t) == tools]


#: The ROS 2 client library and message packages: only the ROS 2 edge imports them (the core never does).
ROS_MODULES = (
    "rclpy",
    "rcl_interfaces",
    "sensor_msgs",
    "geometry_msgs",
    "nav_msgs",
    "std_msgs",
    "std_srvs",
    "trajectory_msgs",
    "diagnostic_msgs",
    "builtin_interfaces",
    "mcap_ros2",
)


def test_only_the_ros2_edge_imports_ros():
    """No module outside idcontrol.ros2 imports rclpy or a ROS message package (the CLI reaches the edge lazily,
    through idcontrol.ros2 itself), so the core installs and runs without ROS."""
    offending = []
    for name, path in modules().items():
        if name == "idcontrol.ros2" or name.startswith("idcontrol.ros2."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offending += [f"{name} -> {n}" for n in names if n.split(".")[0] in ROS_MODULES]
    assert not offending


def test_protocol_doc_lists_the_tick_record_as_the_schema_defines_it():
    """docs/protocol.md's telemetry table is the one generated from TICK_FIELDS (regenerate it with
    ``python -c "from idcontrol.logs import schema; print(schema.markdown_table())"``)."""
    doc = (ROOT / "docs" / "protocol.md").read_text()
    start = "<!-- tick-fields: generated from idcontrol.logs.schema.markdown_table() -->\n"
    end = "<!-- /tick-fields -->"
    assert start in doc and end in doc
    table = doc[doc.index(start) + len(start) : doc.index(end)]
    assert table == schema.markdown_table()


@pytest.mark.parametrize(
    "name", ["controller.py", "launch_file.py", "logs/bench.py", "solvers/kernels.py", "daemon/core.py"]
)
def test_retired_modules_stay_gone(name):
    """The restructure's retired modules (a basement of compiled code, the old core's and settings' homes,
    dead code) do not come back."""
    assert not (PACKAGE / name).exists()
