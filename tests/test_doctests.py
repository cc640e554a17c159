"""Every docstring example of the library runs and prints what it says (one test per module with examples).

The modules are the installed package's: ``geodrift/**``, and ``cli/`` and ``proofs/`` as ``geodrift.cli``
and ``geodrift.proofs``. Examples marked ``# doctest: +SKIP`` (a whole-model scan, a training run, a
write to the working folder) are left out of the default run; the ``slow`` test runs them too, in a
temporary working folder.
"""

from __future__ import annotations

import doctest
import importlib
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"geodrift": ROOT / "geodrift", "geodrift.cli": ROOT / "cli", "geodrift.proofs": ROOT / "proofs"}


def _modules_with_examples() -> list[str]:
    # Module names whose source holds a docstring example, found without importing anything.
    names = []
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            if path.name == "__main__.py" or ">>>" not in path.read_text(encoding="utf-8"):
                continue
            parts = path.relative_to(folder).with_suffix("").parts
            names.append(".".join((package, *parts[:-1])) if parts[-1] == "__init__" else ".".join((package, *parts)))
    return names


MODULES = _modules_with_examples()


def _run(name: str, with_skipped: bool) -> tuple[int, int, str]:
    # (examples run, failures, the failures' report) for one module's docstrings.
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    for test in doctest.DocTestFinder().find(module):
        if with_skipped:
            for example in test.examples:
                example.options.pop(doctest.SKIP, None)
        runner.run(test, out=out.write)
    result = runner.summarize(verbose=False)
    return result.attempted, result.failed, out.getvalue()


def test_the_library_has_docstring_examples():
    assert len(MODULES) > 30 and "geodrift.continuity.verdicts" in MODULES and "geodrift.proofs.claim" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_are_true(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    attempted, failed, report = _run(name, with_skipped=False)
    assert failed == 0, report
    if attempted == 0:
        pytest.skip("every example here is marked +SKIP (see the slow test)")


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_are_true_including_the_skipped_ones(name: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _, failed, report = _run(name, with_skipped=True)
    assert failed == 0, report
