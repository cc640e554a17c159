"""Named text corpora that install offline from PyPI on any machine: what ``geodrift finetune --corpus NAME`` reads.

Each is a deterministic function of an installed package's files (no download at run time); its
documents are split by :func:`geodrift.lm.text.split_documents` (every tenth document held out), and
its sha256 is recorded with every run.

| name | what | source | licence |
|---|---|---|---|
| ``stdlib-docs`` | English technical prose: the Python standard library's docstrings and pydoc topics | the running Python | PSF-2.0 |
| ``django-en`` | English user-interface strings (the ``msgid`` of Django's English catalogues) | ``django`` | BSD-3-Clause |
| ``django-de`` | German user-interface strings (``msgstr`` of Django's German catalogues) | ``django`` | BSD-3-Clause |
| ``django-ja`` | Japanese user-interface strings (``msgstr`` of Django's Japanese catalogues) | ``django`` | BSD-3-Clause |
| ``sympy-code`` | Python source code without docstrings or comments (``ast.unparse`` of ``sympy/core``) | ``sympy`` | BSD-3-Clause |

``stdlib-docs`` is the forgetting probe's kind of text (:mod:`geodrift.lm.text`'s default corpus); the
others are shifted domains. ``sympy`` is a geodrift dependency; Django is the optional extra
``pip install 'geodrift[corpora]'`` (``scripts/setup.sh --test`` installs it). Django is located through
``importlib.metadata`` and never imported: only its ``.po`` files are read.

Example:
    >>> corpus_info("django-de").licence
    'BSD-3-Clause'
    >>> load_named("no-such")
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: --corpus no-such: no such corpus; use one of stdlib-docs, django-en, django-de, django-ja, sympy-code, or a path to a text file or folder
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from geodrift.errors import GeodriftError
from geodrift.lm.text import Corpus, load_corpus, make_corpus, split_documents

CORPORA_EXTRA = "pip install 'geodrift[corpora]'"


@dataclass(frozen=True)
class CorpusInfo:
    """What a named corpus is: its one-line description, the package it comes from and that package's licence."""

    name: str
    description: str
    package: str
    licence: str


def _po_strings(language: str, field: str) -> list[str]:
    # Every non-empty msgid/msgstr (plural forms included) of Django's catalogues for ``language``, in sorted
    # file order, exact duplicates dropped; the header entry (empty msgid) is skipped.
    root = _package_root("django")
    files = sorted(root.glob(f"**/locale/{language}/LC_MESSAGES/*.po"))
    if not files:
        raise GeodriftError(f"--corpus django-{language}: Django at {root} has no {language} catalogues; "
                            f"reinstall Django ({CORPORA_EXTRA})")
    entry = re.compile(r'^(msgid|msgstr(?:\[\d+\])?) ((?:".*"\n?)+)', re.MULTILINE)
    found: list[str] = []
    for path in files:
        for match in entry.finditer(path.read_text(encoding="utf-8")):
            text = "".join(re.findall(r'"(.*)"', match.group(2)))
            text = text.encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
            if match.group(1).startswith(field) and text.strip() and not text.startswith("Project-Id-Version"):
                found.append(text.strip())
    return list(dict.fromkeys(found))


def _package_root(name: str) -> Path:
    from importlib import metadata

    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        hint = CORPORA_EXTRA if name == "django" else f"pip install {name}"
        raise GeodriftError(f"--corpus: the package {name!r} is not installed; {hint}") from None
    root = Path(str(dist.locate_file(name)))
    if not root.is_dir():
        raise GeodriftError(f"--corpus: the package {name!r} has no folder at {root}; reinstall it")
    return root


def _sympy_code() -> list[str]:
    # Each top-level statement of sympy/core's modules (tests excluded), docstrings removed, as ast.unparse writes it.
    root = _package_root("sympy") / "core"
    docs: list[str] = []
    for path in sorted(p for p in root.rglob("*.py") if "tests" not in p.parts):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        docs.extend(ast.unparse(statement) for statement in tree.body)
    return list(dict.fromkeys(d for d in docs if d.strip()))


_LOADERS: dict[str, tuple[CorpusInfo, Callable[[], list[str]] | None]] = {
    "stdlib-docs": (CorpusInfo("stdlib-docs", "English technical prose: the Python standard library's docstrings and "
                               "pydoc help topics (the forgetting probe's kind of text)", "python", "PSF-2.0"), None),
    "django-en": (CorpusInfo("django-en", "English user-interface strings (msgid of Django's English catalogues)",
                             "django", "BSD-3-Clause"), lambda: _po_strings("en", "msgid")),
    "django-de": (CorpusInfo("django-de", "German user-interface strings (msgstr of Django's German catalogues)",
                             "django", "BSD-3-Clause"), lambda: _po_strings("de", "msgstr")),
    "django-ja": (CorpusInfo("django-ja", "Japanese user-interface strings (msgstr of Django's Japanese catalogues)",
                             "django", "BSD-3-Clause"), lambda: _po_strings("ja", "msgstr")),
    "sympy-code": (CorpusInfo("sympy-code", "Python source code without docstrings or comments (ast.unparse of "
                              "sympy/core, tests excluded)", "sympy", "BSD-3-Clause"), _sympy_code),
}
CORPUS_NAMES = tuple(_LOADERS)


def corpus_info(name: str) -> CorpusInfo:
    """The description, package and licence of a named corpus.

    Raises:
        GeodriftError: an unknown name.
    """
    if name not in _LOADERS:
        raise GeodriftError(f"--corpus {name}: no such corpus; use one of {', '.join(CORPUS_NAMES)}, or a path to a "
                            "text file or folder")
    return _LOADERS[name][0]


def load_named(name: str) -> Corpus:
    """A named corpus (:data:`CORPUS_NAMES`) or, for a name that is an existing path, that text file or folder.

    Returns:
        The corpus; its ``source`` names the package and version it was read from.

    Raises:
        GeodriftError: an unknown name that is no path, or the package a corpus needs is missing (names the extra).
    """
    if name not in _LOADERS:
        if Path(name).exists():
            return load_corpus(name)
        corpus_info(name)  # raises, naming the corpora
    return _load(name)


@functools.lru_cache(maxsize=8)
def _load(name: str) -> Corpus:
    info, loader = _LOADERS[name]
    if loader is None:
        return load_corpus(None)
    from importlib import metadata

    docs = loader()
    train, valid = split_documents(docs)
    return make_corpus(name, f"{info.package} {metadata.version(info.package)} ({info.licence})", train, valid)
