"""A user's name mapping (``--names mapping.json``): regular expressions over tensor names -> roles.

Tried before the built-in names (``geodrift.scanner.names``), so it maps an unknown architecture and
can override a built-in name. Roles are named as ``--roles`` names them (``geodrift.weights.ROLE_NAMES``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.scanner.names import KINDS, CanonicalKey
from geodrift.scanner.validate import check_file
from geodrift.weights import EXPERT_ROLES, ROLE_NAMES, canonical_role, expert_role

# A user's --names regex: at most this long, compiled by RE2 into at most this much memory.
MAX_PATTERN_CHARS = 1000
MAX_PATTERN_MEMORY = 8 << 20
MAX_MAPPING_BYTES = 1 << 20


@dataclass(frozen=True)
class NameRule:
    """One regex over tensor names and the canonical kind it yields (a ``--names`` entry).

    Attributes:
        pattern: a full-match regex; its first group, if any, is the layer index; for an expert
            family (``expert_gate`` ...) a second group is the expert index.
        kind: the canonical kind (see the module docstring).
        transpose: the stored matrix is ``(d_in, d_out)`` and must be transposed.
        source: the ``--names`` file the rule came from, named in its errors.
    """

    pattern: str
    kind: str
    transpose: bool = False
    source: str = field(default="--names", compare=False)  # the mapping file, for the messages


def load_name_mapping(path: str | Path) -> list[NameRule]:
    """Read a user mapping: a JSON object ``{regex: role}`` or ``{regex: {"role": r, "transpose": b}}``.

    Each regex must match a whole tensor name; its first group (if any) is the layer index. Roles
    are the ``--roles`` names (``q``, ``k``, ``v``, ``o``, ``gate``, ``up``, ``down``, ``router``,
    ``expert_gate``, ``expert_up``, ``expert_down``, ``shared_gate`` ...; the older ``attn_q``,
    ``mlp_gate`` ... spellings are aliases), a norm/embedding kind (``norm_attn``, ``embed`` ...) or
    ``ignore``. An expert family takes the expert index from the regex's second group, or maps a
    3-D tensor ``(n_experts, d_out, d_in)`` holding every expert. These rules are tried before the
    built-in tables, so they can also override them. The regexes are RE2 syntax (Python's ``re``
    without backreferences and lookarounds; ``\\d`` is ASCII), at most :data:`MAX_PATTERN_CHARS`
    characters and :data:`MAX_PATTERN_MEMORY` bytes compiled: matching takes time linear in the name,
    so no pattern can hang the scan (catastrophic backtracking).

    Args:
        path: the JSON file (the CLI's ``--names``).

    Returns:
        The rules, in file order.

    Raises:
        GeodriftError: when the file is missing, larger than 1 MiB or not JSON, a regex is too long,
            does not compile or needs a backtracking engine, or a role is not in the vocabulary.

    Example:
        ``{"layers\\\\.(\\\\d+)\\\\.attention\\\\.wq\\\\.weight": "q"}``
    """
    path = Path(path)
    if not path.exists():
        raise GeodriftError(f"{path}: name mapping file not found; pass an existing JSON file to --names")
    size = check_file(path, "--names mapping").st_size  # a FIFO would block the read below
    if size > MAX_MAPPING_BYTES:
        raise GeodriftError(f"{path}: a name mapping of {size} bytes is more than the {MAX_MAPPING_BYTES} allowed; "
                            "write one regex per tensor family, not per tensor")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GeodriftError(f"{path}: name mapping file not found; pass an existing JSON file to --names") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GeodriftError(f"{path}: not a readable JSON name mapping ({exc}); write {{\"regex\": \"role\"}}") from None
    if not isinstance(payload, dict) or not payload:
        raise GeodriftError(f"{path}: a name mapping is a non-empty JSON object {{\"regex\": \"role\"}}")
    rules = []
    for pattern, value in payload.items():
        named = value.get("role", value.get("kind")) if isinstance(value, dict) else value
        if not isinstance(named, str):
            raise GeodriftError(f"{path}: value for {pattern!r} must be a role name or {{\"role\": ..., \"transpose\": ...}}")
        transpose = bool(value.get("transpose", False)) if isinstance(value, dict) else False
        kind = mapping_kind(named)
        if kind is None:
            raise GeodriftError(
                f"{path}: unknown role {named!r} for {pattern!r}; use a --roles name ({', '.join(ROLE_NAMES)}), "
                f"a norm or embedding kind ({', '.join(sorted(KINDS - set(ROLE_NAMES.values())))}) or ignore"
            )
        _bounded_regex(pattern, path)
        rules.append(NameRule(pattern, kind, transpose, str(path)))
    return rules


def mapping_kind(name: str) -> str | None:
    """The kind a ``--names`` value stands for: a ``--roles`` name (``q`` or ``attn_q``) or a kind; else None.

    Example:
        >>> mapping_kind("q"), mapping_kind("attn_q"), mapping_kind("expert_gate"), mapping_kind("norm_attn")
        ('attn_q', 'attn_q', 'expert_gate', 'norm_attn')
    """
    role = canonical_role(name)
    if role is not None and "." not in role:
        return role
    return name if name in KINDS else None


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any:
    import re2

    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY
    options.log_errors = False  # RE2 would print its own error on stderr, past the one error line
    return re2.compile(pattern, options)


def _bounded_regex(pattern: str, source: str | Path) -> Any:
    # RE2: linear-time matching, a bounded program; refuses what needs backtracking (\1, lookarounds).
    import re2

    if len(pattern) > MAX_PATTERN_CHARS:
        raise GeodriftError(f"{source}: a regex of {len(pattern)} characters is longer than the "
                            f"{MAX_PATTERN_CHARS} allowed ({pattern[:40]!r}...); shorten it")
    try:
        return _compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise GeodriftError(f"{source}: regex {pattern!r} does not compile as RE2 ({reason}); --names takes RE2 "
                            "syntax: no backreferences or lookarounds, programs up to 8 MiB") from None


def match_name(name: str, rules: list[NameRule]) -> tuple[CanonicalKey, bool] | None:
    """The canonical key and transpose flag of ``name`` under ``rules`` (first match wins), or None."""
    for rule in rules:
        m = _bounded_regex(rule.pattern, "--names").fullmatch(name)
        if m is None:
            continue
        groups = m.groups()
        layer = _index(groups[0] if groups else None, rule, name, "layer index")
        kind = rule.kind
        if kind in EXPERT_ROLES and len(groups) > 1:
            kind = expert_role(kind, _index(groups[1], rule, name, "expert index") or 0)
        return (kind, layer), rule.transpose
    return None


def _index(group: str | None, rule: NameRule, name: str, what: str) -> int | None:
    if group is None:
        return None
    if not group.isdecimal():
        raise GeodriftError(
            f"{rule.source}: name rule {rule.pattern!r} captures {group!r} from tensor {name!r} as the {what}, which "
            "is not an integer; make the rule's group match the number, e.g. (\\d+)"
        )
    return int(group)
