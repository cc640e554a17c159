"""geodrift: geometric continuity of weight singular vectors across depth.

Importing this package has no side effects (no logging set-up, no device probing).
"""

__version__ = "0.1.0"
