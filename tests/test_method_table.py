"""The compression methods' table (``geodrift.compress.table``): the one place a method's name is written.

Every module of geodrift, the CLI and the benchmarks is parsed with ``ast``; a string literal that is a
``compress share`` method or a ``compress prune`` ranking name (or a comma list of them) outside the
table fails the test. ``geodrift`` is both the package's and a method's name, so it counts only in the
compression modules (where it can only mean the method).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from geodrift.compress import table
from geodrift.compress.table import METHODS, RANKINGS

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "geodrift" / "compress" / "table.py"
SOURCES = [*(ROOT / "geodrift").rglob("*.py"), *(ROOT / "cli").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
# Where a bare "geodrift" can only be the method (elsewhere it is the package, the program or a JSON key).
COMPRESSION = ("geodrift/compress/", "cli/compress_cmd.py", "cli/choices.py", "geodrift/render/compress",
               "geodrift/reproduction.py", "benchmarks/compress_tables.py")


def method_literals(source: str, *, compression: bool) -> list[tuple[int, str]]:
    """``(line, literal)`` of every string constant in ``source`` that is a method name or a comma list of them."""
    everywhere = (set(METHODS) | set(RANKINGS)) - {table.CANDIDATE}
    known = everywhere | {table.CANDIDATE} if compression else everywhere
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            items = [item.strip() for item in node.value.split(",")]
            if node.value in known or (len(items) > 1 and all(item in known for item in items)):
                found.append((node.lineno, node.value))
    return sorted(found)


def test_the_finder_sees_a_method_name_a_list_of_them_and_the_candidate_only_where_it_is_the_method():
    planted = 'A = "svd-llm"\nB = f"x {y}" + "geodrift:swapped"\nC = "prune-bi,laco"\nD = "geodrift"\nE = "svd-llm is"\n'
    assert method_literals(planted, compression=True) == [(1, "svd-llm"), (2, "geodrift:swapped"), (3, "prune-bi,laco"),
                                                          (4, "geodrift")]
    assert (4, "geodrift") not in method_literals(planted, compression=False)


def test_no_method_name_is_written_outside_the_table():
    assert TABLE in SOURCES and len(SOURCES) > 100
    found = []
    for path in SOURCES:
        if path == TABLE:
            continue
        rel = path.relative_to(ROOT).as_posix()
        found += [f"{rel}:{line}: {value!r}" for line, value in
                  method_literals(path.read_text(encoding="utf-8"), compression=rel.startswith(COMPRESSION))]
    assert not found, "method names outside geodrift/compress/table.py:\n" + "\n".join(found)


def test_the_table_is_consistent_with_itself_and_the_library():
    from geodrift.compress.allocate import loss_per_parameter_ranks  # noqa: F401  (the allocations named exist)
    from geodrift.weights import TRANSFORMER_ROLES

    assert table.ROLES == TRANSFORMER_ROLES
    for name, m in METHODS.items():
        assert m.kind in (table.BASELINE, table.CONTINUITY, table.CONTROL), name
        assert m.control_of is None or (m.control_of in METHODS and m.changes), name
        assert (m.kind == table.CONTROL) <= (m.control_of is not None), name
        if m.order is not None:  # removal: its order is owned by a method that names the ranking computing it
            assert m.spaces is None and METHODS[m.order].ranking in RANKINGS, name
        else:
            assert m.spaces in (table.MEASURED, table.SWAPPED) or set(m.spaces or {}) == set(TRANSFORMER_ROLES), name
            assert m.allocation in (table.UNIFORM, table.V2, table.LOSS_PER_PARAMETER), name
    assert table.CANDIDATE in METHODS and METHODS[table.GROUPING_CONTROL].control_of == table.CANDIDATE
    assert METHODS[table.GROUPING_CONTROL].groups == table.RANDOM
    assert all(name in METHODS for name in table.AGAINST_BEST)
    assert {r.score for r in RANKINGS.values()} >= set(RANKINGS) - {table.ANGULAR, table.GREEDY}


@pytest.mark.parametrize("mode", ["quick", "smoke"])
def test_the_reproduction_presets_read_the_table(mode: str):
    from geodrift.reproduction import compress_plan

    plan = compress_plan(mode)
    assert plan.prune.methods == table.names(RANKINGS, preset=mode)
    if plan.share is not None:
        assert plan.share.methods == table.names(METHODS, preset=mode)
