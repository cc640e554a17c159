"""Text from files, paths and options shown exactly as it is, on one line.

A tensor name, a file name or an option value can hold anything: rich markup (``[bold red]``), a
terminal escape sequence (``\\x1b[2J`` clears the screen), a carriage return that overprints the
line, a newline that splits a one-line error in two, a right-to-left override that reverses what
follows. Printed raw, such text crashes the table or makes the output look like something else.
:func:`visible` keeps every printable character as it is and writes every other one as a Python
escape; the tables print its result as rich ``Text`` (never markup), and the CLI's error line
passes through it.
"""

from __future__ import annotations

import unicodedata

# Unicode categories never printed raw: controls, format characters (bidi overrides, zero-width),
# line/paragraph separators, surrogates, private use and unassigned code points.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def visible(text: str) -> str:
    """``text`` with every control, format or unassigned character written as an escape (``\\x1b``, ``\\u202e``).

    Printable text comes back unchanged, so a name round-trips exactly into a table or an error.

    Example:
        >>> visible("model.layers.0.[bold red]q_proj")
        'model.layers.0.[bold red]q_proj'
        >>> visible("a\\x1b[2Jb\\nc")
        'a\\\\x1b[2Jb\\\\nc'
    """
    if text.isprintable():
        return text
    return "".join(_escape(ch) if unicodedata.category(ch) in _HIDDEN else ch for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if ch in named:
        return named[ch]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
