"""Packaging: the built wheel holds every module of the checkout under its installed name, and a
source checkout resolves ``geodrift.cli`` / ``geodrift.proofs`` without any install.

The wheel is built offline (``pip wheel --no-deps --no-build-isolation``, the venv's setuptools)
from a copy of the package sources in tmp_path, so a stale in-tree ``build/`` folder can neither
leak into it nor be written into the checkout.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# top-level folder of the checkout -> its installed package path (pyproject's package-dir)
MAPPED = {"geodrift": "geodrift", "cli": "geodrift/cli", "proofs": "geodrift/proofs"}


def _setuptools_or_skip() -> None:
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("setuptools is not installed in this venv; the offline wheel build needs it "
                    "(pip install 'setuptools>=77', part of the test extra)")
    if int(version.split(".")[0]) < 77:
        pytest.skip(f"setuptools {version} is too old for pyproject's license field (needs >= 77)")


def _checkout_modules() -> set[str]:
    """Every .py file the checkout's package folders hold, as its path inside the wheel."""
    found = set()
    for folder, installed in MAPPED.items():
        for file in (ROOT / folder).rglob("*.py"):
            if "__pycache__" not in file.parts:
                found.add(f"{installed}/{file.relative_to(ROOT / folder).as_posix()}")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    _setuptools_or_skip()
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in MAPPED:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (built,) = dist.glob("geodrift-*.whl")
    return zipfile.ZipFile(built)


def test_wheel_holds_every_module_of_the_checkout_under_its_installed_name(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert {"geodrift/cli/main.py", "geodrift/proofs/__init__.py", "geodrift/__main__.py"} <= names
    subpackages = sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "geodrift").glob("*/__init__.py"))
    assert subpackages, "no geodrift/* subpackages found in the checkout"
    missing_packages = [pkg for pkg in subpackages if f"{pkg}/__init__.py" not in names]
    assert not missing_packages, f"add {missing_packages} to [tool.setuptools] packages in pyproject.toml"
    missing = sorted(_checkout_modules() - names)
    assert not missing, f"modules missing from the wheel: {missing}"
    stray = sorted(n for n in names if n.endswith(".py") and not n.startswith("geodrift/"))
    assert not stray, f"top-level modules in the wheel (cli/proofs must install as geodrift.*): {stray}"


def test_wheel_declares_the_console_script(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "geodrift = geodrift.cli.entry:main" in wheel.read(entry_points).decode()


def test_source_checkout_resolves_cli_and_proofs_without_an_install() -> None:
    # -I -S: no site-packages, so neither an editable finder nor an installed copy can answer;
    # only geodrift/__init__.py's source-checkout branch can map geodrift.cli to the top-level cli/.
    code = ("import importlib.util as u, sys; sys.path.insert(0, sys.argv[1]); "
            "print(u.find_spec('geodrift.cli').origin); print(u.find_spec('geodrift.proofs').origin); "
            "print(u.find_spec('geodrift.scanner').origin)")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    origins = [Path(line) for line in done.stdout.split()]
    assert origins == [ROOT / "cli" / "__init__.py", ROOT / "proofs" / "__init__.py",
                       ROOT / "geodrift" / "scanner" / "__init__.py"]
