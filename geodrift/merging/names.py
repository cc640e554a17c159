"""The names ``geodrift merge`` accepts (standard library only: the command line's choices import them without torch).

Example:
    >>> METHODS[0], ALIGN_MODES
    ('linear', ('auto', 'on', 'off'))
"""

from __future__ import annotations

# The merge rules (geodrift.merging.methods) and those that add task vectors to a --base.
METHODS = ("linear", "slerp", "task-arithmetic", "ties", "dare")
NEEDS_BASE = ("task-arithmetic", "ties", "dare")
# --align: auto (align the models that are not in the reference's gauge), on (every model), off (none).
ALIGN_MODES = ("auto", "on", "off")
