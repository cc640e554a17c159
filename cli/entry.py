"""The console entry point: the signal policy first, then the command line.

``geodrift.io.signals.install`` runs before typer or any command module is imported (and, before it, a handler
that only records a signal, installed when this module is imported), so Ctrl-C at any
moment - even while the CLI is still starting - prints one ``interrupted`` line and exits 130
(SIGTERM: 143), with the temporary files of atomic writes removed (see ``geodrift/io/signals.py``).
"""

from __future__ import annotations

import signal as _signal

# Until the policy is installed (importing it takes a few milliseconds), a signal is only recorded; it is
# delivered again once the policy's handler is in place.
_EARLY: list[int] = []


def _record(signum: int, frame: object) -> None:
    _EARLY.append(signum)


for _signum in (_signal.SIGINT, _signal.SIGTERM):
    _signal.signal(_signum, _record)


def use_huge_pages() -> None:
    """Ask torch's CPU allocator to put tensors of 2 MB and more on transparent huge pages (``madvise``).

    torch reads ``THP_MEM_ALLOC_ENABLE`` once, at its first allocation, so this runs before torch is imported. A
    scan's full-size temporaries then fault in 2 MB pages instead of 4 kB ones: converting an 8B layer's MLP
    matrix to float32 takes 57k page faults without it and about 600 with it, 3x faster (docs/benchmarks.md).
    The user's own setting wins (``THP_MEM_ALLOC_ENABLE=0`` turns it off); where the kernel has no transparent
    huge pages the setting does nothing.
    """
    import os

    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def main(argv: list[str] | None = None) -> None:
    """Run ``geodrift`` under the signal policy (the ``[project.scripts]`` target)."""
    use_huge_pages()
    from geodrift.io import signals

    try:
        signals.install()  # inside the try: a signal arriving while it runs is the policy's already
        if _EARLY:
            _signal.raise_signal(_EARLY[0])
        from geodrift.cli.main import main as run

        run(argv)
    except signals.Interrupted as interrupt:
        signals.finish(interrupt.signum)


if __name__ == "__main__":
    main()
