"""A user's name mapping (``--names mapping.json``): regular expressions over tensor names -> roles.

Tried before the built-in names (``geodrift.scan.names``), so it maps an unknown architecture and
can override a built-in name. Roles are named as ``--roles`` names them (``geodrift.weights.ROLE_NAMES``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from geodrift.errors import GeodriftError
from geodrift.scan.names import KINDS, CanonicalKey
from geodrift.scan.validate import check_file
from geodrift.weights import EXPERT_ROLES, ROLE_NAMES, canonical_role, expert_role


@dataclass(frozen=True)
class NameRule:
    """One regex over tensor names and the canonical kind it yields (a ``--names`` entry).

    Attributes:
        pattern: a full-match regex; its first group, if any, is the layer index; for an expert
            family (``expert_gate`` ...) a second group is the expert index.
        kind: the canonical kind (see the module docstring).
        transpose: the stored matrix is ``(d_in, d_out)`` and must be transposed.
    """

    pattern: str
    kind: str
    transpose: bool = False


def load_name_mapping(path: str | Path) -> list[NameRule]:
    """Read a user mapping: a JSON object ``{regex: role}`` or ``{regex: {"role": r, "transpose": b}}``.

    Each regex must match a whole tensor name; its first group (if any) is the layer index. Roles
    are the ``--roles`` names (``q``, ``k``, ``v``, ``o``, ``gate``, ``up``, ``down``, ``router``,
    ``expert_gate``, ``expert_up``, ``expert_down``, ``shared_gate`` ...; the older ``attn_q``,
    ``mlp_gate`` ... spellings are aliases), a norm/embedding kind (``norm_attn``, ``embed`` ...) or
    ``ignore``. An expert family takes the expert index from the regex's second group, or maps a
    3-D tensor ``(n_experts, d_out, d_in)`` holding every expert. These rules are tried before the
    built-in tables, so they can also override them.

    Args:
        path: the JSON file (the CLI's ``--names``).

    Returns:
        The rules, in file order.

    Raises:
        GeodriftError: when the file is missing, not JSON, a regex does not compile or a role is
            not in the vocabulary.

    Example:
        ``{"layers\\\\.(\\\\d+)\\\\.attention\\\\.wq\\\\.weight": "q"}``
    """
    path = Path(path)
    if not path.exists():
        raise GeodriftError(f"{path}: name mapping file not found; pass an existing JSON file to --names")
    check_file(path, "--names mapping")  # a FIFO would block the read below
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
        try:
            re.compile(pattern)
        except re.error as exc:
            raise GeodriftError(f"{path}: regex {pattern!r} does not compile ({exc})") from None
        rules.append(NameRule(pattern, kind, transpose))
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


def match_name(name: str, rules: list[NameRule]) -> tuple[CanonicalKey, bool] | None:
    """The canonical key and transpose flag of ``name`` under ``rules`` (first match wins), or None."""
    for rule in rules:
        m = re.fullmatch(rule.pattern, name)
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
            f"name rule {rule.pattern!r} captures {group!r} from tensor {name!r} as the {what}, which "
            "is not an integer; make the rule's group match the number, e.g. (\\d+)"
        )
    return int(group)
