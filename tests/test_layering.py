"""The architecture, checked: imports point one way, no cycles, light imports where the CLI starts.

Layers, bottom to top: errors/io (the plumbing)/weights -> linalg -> metrics and gauge -> continuity -> lm (the
Llama, its tokenizers, text corpora, activations and Hugging Face writer) -> {scan, sim} -> {prove,
sweep (runs sim specs on a backend), pretrained} -> compress -> reproduction (the whole paper) ->
jobs (one typed job per command, called by both faces) -> render -> cli and the Python API (``geodrift.api``, a face
like the CLI: its reports draw their figures). ``lm`` imports neither ``scan`` nor ``sim``; ``scan`` and
``sim`` never import each other. The scanner meets the language model or the simulators in the BRIDGES only: ``pretrained``
(the one door from checkpoints to models) and ``reproduction`` (which runs the scan and the
simulators side by side); ``compress`` reaches checkpoints through ``pretrained``. ``proofs`` is
sympy (and its mpmath) only. Every import counts, including those inside functions and under
``TYPE_CHECKING``. No module uses a ``_private`` name that another package defines.
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
    "geodrift.errors": 0, "geodrift.io": 0, "geodrift.weights": 0, "geodrift": 0, "geodrift.proofs": 0,
    "geodrift.linalg": 1, "geodrift.metrics": 2, "geodrift.gauge": 2, "geodrift.continuity": 3, "geodrift.lm": 4,
    "geodrift.scanner": 5, "geodrift.sim": 5, "geodrift.api": 11, "geodrift.api_series": 11,
    "geodrift.prove": 6, "geodrift.sweep": 6, "geodrift.pretrained": 6,
    "geodrift.finetune": 6,  # fine-tuning runs: models through pretrained; the sweep runs them as a job kind
    "geodrift.compress": 7, "geodrift.merging": 7, "geodrift.reproduction": 8, "geodrift.jobs": 9, "geodrift.render": 10,
    "geodrift.cli": 11, "geodrift.__main__": 11,
}
# The only modules that may import the scanner together with the language model or the simulators.
BRIDGES = {"geodrift.pretrained", "geodrift.reproduction"}


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


def _touches(name: str) -> set[str]:
    """The packages a module belongs to or imports."""
    return {_group(name)} | {_group(t) for t in GRAPH[name]}


def test_only_the_bridges_import_the_scanner_together_with_the_language_model_or_the_simulators():
    mixed = sorted(name for name in GRAPH
                   if "geodrift.scanner" in _touches(name) and _touches(name) & {"geodrift.lm", "geodrift.sim"})
    assert mixed == sorted(BRIDGES)


def test_the_language_model_imports_neither_the_scanner_nor_the_simulators_and_compress_goes_through_pretrained():
    for name in GRAPH:
        if name.startswith("geodrift.lm"):
            assert not _touches(name) & {"geodrift.scanner", "geodrift.sim"}, name
        if name.startswith(("geodrift.compress", "geodrift.merging")):
            assert not _touches(name) & {"geodrift.scanner", "geodrift.sim"}, name
        if name.startswith(("geodrift.continuity", "geodrift.metrics", "geodrift.linalg", "geodrift.gauge")):
            assert not _touches(name) & {"geodrift.sim", "geodrift.scanner", "geodrift.lm", "geodrift.render",
                                         "geodrift.cli"}, name


def _private(name: str) -> bool:
    return name.startswith("_") and name.strip("_") != "" and not (name.startswith("__") and name.endswith("__"))


def _private_definitions() -> dict[str, set[str]]:
    """``{_name: packages defining it}``: functions, classes, methods, and names or attributes assigned."""
    defined: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [sub.id if isinstance(sub, ast.Name) else sub.attr for target in targets
                         for sub in ast.walk(target) if isinstance(sub, (ast.Name, ast.Attribute))]
            for found in filter(_private, names):
                defined.setdefault(found, set()).add(_group(name))
    return defined


def test_no_module_uses_a_private_name_that_another_package_defines():
    """``from x import _y`` / ``import x._y`` across packages, and ``anything._y`` (``module._y``,
    ``obj._method(``, ``obj._attr``) where ``_y`` is defined in another package and not in the caller's own.

    What it sees: every geodrift, cli and proofs module (not the tests, which may test private
    helpers), by name: a ``_y`` counts as the other package's when the caller's package defines no
    ``_y`` of its own (def, class, method, assignment, ``self._y = ...``). What it cannot see: types
    (an ``obj._y`` whose name the caller's package also defines passes, whoever owns ``obj``),
    ``getattr(obj, "_y")`` with a string, and private names of libraries (torch's ``_C`` and the like).
    """
    defined = _private_definitions()
    found = []
    for name, path in MODULES.items():
        own = _group(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                outside = _group(base) != own if base.startswith("geodrift") else False
                found += [f"{name}: from {base} import {a.name}" for a in node.names
                          if outside and (_private(a.name) or any(map(_private, base.split("."))))]
            elif isinstance(node, ast.Import):
                found += [f"{name}: import {a.name}" for a in node.names if a.name.startswith("geodrift")
                          and _group(a.name) != own and any(map(_private, a.name.split(".")))]
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                owners = defined.get(node.attr, set())
                if owners and own not in owners:
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)} ({node.attr} is {', '.join(sorted(owners))}'s)")
    assert not found


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


# --- Each command: parse -> one job -> render (issue 32) -------------------------------------------------------
# A Typer command (a function under ``@app.command(...)`` in cli/) parses its options, calls ONE job
# (``geodrift.jobs.<module>.run_*``) and renders: every library entry it imports - itself or through the cli
# helpers it calls - comes from that one jobs module; render (geodrift.render), the CLI's own modules and
# geodrift.errors are not library entries. Its body (and each cli helper's it calls) is at most 40 lines,
# counted from the first statement after the docstring to the end.
NOT_LIBRARY = ("geodrift.render", "geodrift.cli", "geodrift.errors")
MAX_BODY_LINES = 40
COMMANDS = {"scan_cmd:scan", "series_cmd:drift", "series_cmd:compare", "inspect_cmd:inspect", "prove_cmd:prove",
            "simulate_cmd:mlp", "simulate_cmd:transformer", "compress_cmd:prune", "compress_cmd:share",
            "sweep_cmd:sweep", "reproduce_cmd:reproduce", "explain_cmd:explain",
            "merge_cmd:merge", "finetune_cmd:finetune"}


def _library(module: str) -> bool:
    return module.startswith("geodrift") and not any(module == m or module.startswith(m + ".") for m in NOT_LIBRARY)


def _imported(node: ast.AST, package: str) -> dict[str, tuple[str, str]]:
    """Local name -> (module, name) for the geodrift imports directly in ``node`` (a module or a function)."""
    out: dict[str, tuple[str, str]] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.ImportFrom):
            base = sub.module or ""
            if sub.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - sub.level + 1] + ([base] if base else []))
            for alias in sub.names:
                out[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(sub, ast.Import):
            for alias in sub.names:
                out[alias.asname or alias.name.split(".")[0]] = (alias.name, "*")
    return {name: target for name, target in out.items() if target[0].startswith("geodrift")}


class _CliSource:
    """The cli modules parsed once: their commands, functions and module-level imports."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.trees = {name: ast.parse(text) for name, text in sources.items()}
        self.functions = {(name, node.name): node for name, tree in self.trees.items() for node in tree.body
                          if isinstance(node, ast.FunctionDef)}
        self.top = {name: _imported(ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
                                               type_ignores=[]), "geodrift.cli")
                    for name, tree in self.trees.items()}

    def commands(self) -> dict[str, tuple[str, ast.FunctionDef]]:
        out = {}
        for (module, _), node in self.functions.items():
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "command":
                    name = deco.args[0].value if deco.args and isinstance(deco.args[0], ast.Constant) else node.name
                    out[f"{module}:{name}"] = (module, node)
        return out

    def reach(self, module: str, node: ast.FunctionDef) -> list[tuple[str, ast.FunctionDef]]:
        """``node`` and every cli function it calls, transitively (by name, in its module or imported from cli)."""
        seen: dict[tuple[str, str], ast.FunctionDef] = {}
        todo = [(module, node)]
        while todo:
            mod, fn = todo.pop()
            if (mod, fn.name) in seen:
                continue
            seen[(mod, fn.name)] = fn
            names = {**self.top[mod], **_imported(fn, "geodrift.cli")}
            for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call)):
                target = None
                if isinstance(call.func, ast.Name):
                    origin = names.get(call.func.id)
                    target = (origin[0].removeprefix("geodrift.cli."), origin[1]) if origin and \
                        origin[0].startswith("geodrift.cli.") else (mod, call.func.id)
                elif isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
                    origin = names.get(call.func.value.id)
                    if origin and origin[0] == "geodrift.cli":  # from geodrift.cli import choices; choices.f()
                        target = (origin[1], call.func.attr)
                if target in self.functions:
                    todo.append((target[0], self.functions[target]))
        return [(mod, fn) for (mod, _), fn in seen.items()]

    def entries(self, module: str, node: ast.FunctionDef) -> tuple[set[tuple[str, str]], set[str]]:
        """The library entries a command imports (itself or through its cli helpers), and the names it calls."""
        used: set[tuple[str, str]] = set()
        called: set[str] = set()
        for mod, fn in self.reach(module, node):
            local = _imported(fn, "geodrift.cli")
            names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
            used |= set(local.values()) | {self.top[mod][n] for n in names if n in self.top[mod]}
            called |= {c.func.id for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
        return {(m, n) for m, n in used if _library(m)}, called

    def problems(self, label: str) -> list[str]:
        """Why a command is not parse -> one job -> render (empty when it is)."""
        module, node = self.commands()[label]
        entries, called = self.entries(module, node)
        modules = sorted({m for m, _ in entries})
        runs = sorted({n for m, n in entries if n.startswith("run_") and n in called})
        found = []
        if len(modules) != 1 or not modules[0].startswith("geodrift.jobs."):
            found.append(f"library entries from {modules or 'nothing'}, not from one geodrift.jobs module: "
                         f"{sorted(f'{m}.{n}' for m, n in entries)}")
        if len(runs) != 1:
            found.append(f"calls {len(runs)} run_* jobs ({runs}), not exactly one")
        return found

    def long_bodies(self, label: str) -> list[str]:
        """The command and cli helpers it reaches whose body exceeds MAX_BODY_LINES lines."""
        module, node = self.commands()[label]
        out = []
        for mod, fn in self.reach(module, node):
            body = fn.body[1:] if ast.get_docstring(fn) is not None and len(fn.body) > 1 else fn.body
            lines = (fn.end_lineno or 0) - body[0].lineno + 1
            if lines > MAX_BODY_LINES:
                out.append(f"{mod}.{fn.name}: {lines} lines")
        return out


CLI = _CliSource({path.stem: path.read_text(encoding="utf-8") for path in (ROOT / "cli").glob("*.py")})


def test_every_command_is_found():
    assert set(CLI.commands()) == COMMANDS


@pytest.mark.parametrize("label", sorted(COMMANDS))
def test_each_command_imports_library_entries_from_one_job_and_calls_one_run(label: str):
    assert CLI.problems(label) == []


@pytest.mark.parametrize("label", sorted(COMMANDS))
def test_each_command_body_is_at_most_40_lines(label: str):
    assert CLI.long_bodies(label) == []


_SHAPE = '''
from geodrift.cli.options import Quiet

@app.command("x")
def x_command(quiet: Quiet = False) -> None:
    """Doc."""
    from geodrift.jobs.x import XRequest, run_x
    from geodrift.render.x import show_x
    {extra}
    show_x(run_x(XRequest()), quiet=quiet)
'''


@pytest.mark.parametrize(("extra", "complaint"), [
    ("", None),
    ("from geodrift.scanner.scan import parse_roles", "not from one geodrift.jobs module"),
    ("from geodrift.io.atomic import to_json", "not from one geodrift.jobs module"),
    ("import geodrift.sim", "not from one geodrift.jobs module"),
    ("from geodrift.jobs.y import run_y; run_y()", "not from one geodrift.jobs module"),
    ("from geodrift.jobs.x import run_x2; run_x2()", "calls 2 run_* jobs"),
    ("_helper()", "not from one geodrift.jobs module"),  # library work hidden in a cli helper is still seen
])
def test_the_one_job_check_fails_on_a_second_library_entry(extra: str, complaint: str | None):
    helper = "\n\ndef _helper() -> None:\n    from geodrift.continuity import MeasureSpec\n    MeasureSpec()\n"
    source = _CliSource({"x_cmd": _SHAPE.replace("{extra}", extra) + helper})
    problems = source.problems("x_cmd:x")
    assert (problems == []) if complaint is None else any(complaint in p for p in problems), problems


def test_the_body_length_check_counts_from_the_first_statement_after_the_docstring():
    body = "\n".join(["    n = 0"] + ["    n += 1"] * (MAX_BODY_LINES - 1))
    source = '@app.command("y")\ndef y() -> None:\n    """Doc\n    on two lines."""\n' + body + "\n"
    assert _CliSource({"y_cmd": source}).long_bodies("y_cmd:y") == []
    assert _CliSource({"y_cmd": source + "    n += 1\n"}).long_bodies("y_cmd:y") == ["y_cmd.y: 41 lines"]
