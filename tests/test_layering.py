"""The architecture, checked: imports point one way, no cycles, light imports where the CLI starts.

Layers, bottom to top: errors/atomic/weights -> linalg -> metrics -> continuity -> {scan, sim, prove}
-> sweep (runs sim specs on a backend) -> pretrained (the one bridge importing both scan and sim) and
reproduction (the whole paper: proofs, scan, sweeps) -> render -> cli. ``proofs`` is sympy
(and its mpmath) only. Every import counts, including those inside functions.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# source folder -> package name as installed
PACKAGES = {ROOT / "geodrift": "geodrift", ROOT / "cli": "geodrift.cli", ROOT / "proofs": "geodrift.proofs"}
LAYERS = {
    "geodrift.errors": 0, "geodrift.atomic": 0, "geodrift.weights": 0, "geodrift": 0,
    "geodrift.linalg": 1, "geodrift.metrics": 2, "geodrift.continuity": 3,
    "geodrift.scan": 4, "geodrift.lm": 4, "geodrift.sim": 4, "geodrift.prove": 5, "geodrift.sweep": 5,
    "geodrift.pretrained": 6, "geodrift.compress": 6, "geodrift.reproduction": 6,
    "geodrift.render": 7, "geodrift.cli": 8, "geodrift.__main__": 8, "geodrift.proofs": 0,
}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in folder.rglob("*.py"):
            if folder == ROOT / "geodrift" and path.relative_to(folder).parts[0] in ("cli", "proofs"):
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts]) if parts else package] = path
    return out


def _imports(name: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


MODULES = _modules()
# A module's own ancestor packages are always imported first; they are not dependencies.
GRAPH = {name: {imp for imp in _imports(name, path) if imp in MODULES and not (name + ".").startswith(imp + ".")}
         for name, path in MODULES.items()}


def _layer(module: str) -> int:
    while module not in LAYERS:
        module = module.rpartition(".")[0]
    return LAYERS[module]


def _group(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def test_there_is_no_import_cycle_between_modules():
    # Tarjan's strongly connected components: any component with more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles


def test_imports_point_down_the_layers():
    upward = [(a, b) for a, targets in GRAPH.items() for b in targets
              if _layer(b) > _layer(a) and _group(b) != _group(a) and b != "geodrift"]
    assert not upward


def test_only_the_bridge_imports_both_the_scanner_and_the_simulators():
    for name, targets in GRAPH.items():
        groups = {_group(t) for t in targets}
        if name.startswith("geodrift.sim"):
            assert "geodrift.scan" not in groups, name
        if name.startswith("geodrift.scan"):
            assert "geodrift.sim" not in groups, name
        if name.startswith(("geodrift.continuity", "geodrift.metrics", "geodrift.linalg")):
            assert not groups & {"geodrift.sim", "geodrift.scan", "geodrift.render", "geodrift.cli"}, name


@pytest.mark.parametrize("library", ["rich", "matplotlib"])
def test_only_the_render_package_imports_rich_and_matplotlib(library: str):
    users = [name for name, path in MODULES.items()
             if any(i == library or i.startswith(library + ".") for i in _imports(name, path))]
    assert users and all(u.startswith("geodrift.render") for u in users), users


def test_proofs_import_sympy_only_and_never_torch():
    for name, path in MODULES.items():
        if name.startswith("geodrift.proofs"):
            outside = {i.split(".")[0] for i in _imports(name, path)} - {"sympy", "mpmath", "geodrift", "__future__"}
            assert outside <= set(sys.stdlib_module_names), (name, outside)
            assert not {i for i in _imports(name, path) if i.startswith("geodrift.") and
                        not i.startswith("geodrift.proofs")}, name
    code = "import sys, geodrift.proofs.registry; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_help_and_version_do_not_import_torch():
    code = ("import sys\nfrom geodrift.cli.main import main\nfor args in (['--help'], ['--version'], ['simulate', '-h']):\n"
            "    try:\n        main(args)\n    except SystemExit:\n        pass\nprint('torch' in sys.modules, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stderr.strip().splitlines()[-1] == "False"
    assert "Usage" in result.stdout and "geodrift 0." in result.stdout


def test_commands_without_a_figure_or_a_cluster_never_import_matplotlib_nor_ray(tmp_path: Path):
    # Issue 22: matplotlib cost about 1 s of every scan's start-up though only --plot draws; Ray only --backend ray.
    from _checkpoints import hf_config, llama_state, write_hf_folder

    models = []
    for seed in (0, 1):
        folder = tmp_path / f"m{seed}"
        write_hf_folder(folder, llama_state(n_layers=3, seed=seed), hf_config(n_layers=3))
        models.append(str(folder))
    code = ("import sys\nfrom geodrift.cli.main import main\n"
            "for args in (['scan', sys.argv[1], '--brief', '-q', '--null-draws', '4'],\n"
            "             ['drift', sys.argv[1], sys.argv[2], '-q', '--null-draws', '4'],\n"
            "             ['compare', sys.argv[1], sys.argv[2], '-q', '--null-draws', '4']):\n"
            "    try:\n        main(args)\n    except SystemExit as end:\n        assert not end.code, (args, end.code)\n"
            "print(sorted(m for m in ('matplotlib', 'ray') if m in sys.modules), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code, *models], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == "[]"
