"""The model a fine-tuning run may take, checked from the checkpoint's headers before anything is loaded.

Example:
    >>> check_model(None)
    'llama'
"""

from __future__ import annotations

from pathlib import Path

from geodrift.errors import GeodriftError
from geodrift.scanner.readers import open_checkpoint

RUNS_ITSELF = ("llama", "mistral")


def check_model(model: str | None) -> str:
    """The checkpoint's architecture, when ``geodrift finetune`` can train it.

    llama/mistral checkpoints in any format run in geodrift's own Llama; any other dense architecture needs a
    Hugging Face folder (``config.json``: ``transformers`` loads it).

    Raises:
        GeodriftError: an unreadable checkpoint, a mixture of experts, or another architecture outside a Hugging
            Face folder (one line naming the file, the architecture and what to pass instead).
    """
    ckpt = open_checkpoint(model)
    if any(kind == "router" for kind, _ in ckpt.plan):
        raise GeodriftError(f"MODEL {ckpt.label}: a mixture of experts; geodrift finetune trains dense causal LMs")
    if ckpt.architecture in RUNS_ITSELF:
        return ckpt.architecture
    if model is not None and Path(model).is_dir() and (Path(model) / "config.json").is_file():
        return ckpt.architecture
    raise GeodriftError(f"MODEL {ckpt.label}: architecture {ckpt.architecture!r} outside a Hugging Face folder; "
                        f"geodrift finetune trains {'/'.join(RUNS_ITSELF)} checkpoints (GGUF, safetensors or a folder) "
                        "and other architectures as a Hugging Face folder with config.json")
