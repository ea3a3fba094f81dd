"""Do two models answer a route alike? By what must match, not by the bytes of the body.

A real app's bodies vary by themselves: a timestamp, a request id, a UUID, a CSRF token, the
request's own URL echoed back (and each model listens on its own port). Comparing digests would
refuse every such app, so a body is compared by its shape:

- JSON (a content type that says so, and a body that parses): the same keys and value types,
  recursively; a list by the shape of its items. Values are data, never compared.
- anything else: the text that is stable when the same model answers the same route twice. The
  first model answers each route twice; what differs between its two answers (word by word, a
  word with a digit in it read as a value: a number, an id, a token, a date) becomes a gap, and
  another model's answer must hold every stable part in order, anything in the gaps.

Where a model's own address appears in its body (`127.0.0.1:41234`) it is read as one placeholder
first, in every mode. `exact` (the user's choice) compares the rest byte for byte.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

MODES = ("shape", "exact")
TOKENS = re.compile(r"[\w-]+|\s+|.", re.DOTALL)  # words (a UUID, a date whole), spaces, a char
VALUE = re.compile(r"[\w-]*\d[\w-]*")  # a word with a digit: a number, an id, a token, a date
MAX_DIFF_TOKENS = 20_000  # beyond this a varying middle is one gap: difflib is quadratic
SHOWN = 3  # varying spans or differences named in words
ANY = "any"  # a JSON value whose type varied by itself
VALUES_VARIED = "only words with a digit in them (numbers, ids, tokens, dates)"


def own_address_read(body: bytes, address: str) -> str:
    """The body as text (latin-1: every byte is one character, nothing can fail to decode) with
    the server's own `host:port` read as one placeholder (each model listens on its own port)."""
    text = body.decode("latin-1")
    return text.replace(address, "{server}") if address else text


def is_json(content_type: str) -> bool:
    return "json" in content_type.lower()


def json_shape(value: Any) -> Any:
    """A JSON value's shape: an object's keys with their shapes, a list's items' merged shape,
    a scalar's type (integers and decimals are both numbers)."""
    if isinstance(value, dict):
        return {"{}": {key: json_shape(v) for key, v in value.items()}}
    if isinstance(value, list):
        shape: Any = None  # an empty list: items of no known shape yet
        for item in value:
            shape = merge(shape, json_shape(item))
        return {"[]": shape}
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else "str"


def merge(a: Any, b: Any) -> Any:
    """The shape both `a` and `b` conform to: where they differ, ANY; a key only one has is
    optional (kept apart, under "{?}": a name of its own could end in anything, even "?"). None
    (an empty list's items) merges to the other."""
    if a is None or b is None:
        return b if a is None else a
    if a == b:
        return a
    if _is_list(a) and _is_list(b):
        return {"[]": merge(a["[]"], b["[]"])}
    if not (_is_object(a) and _is_object(b)):
        return ANY
    keys_a, keys_b = a["{}"], b["{}"]
    both = {k: merge(keys_a[k], keys_b[k]) for k in keys_a if k in keys_b}
    optional: dict[str, Any] = {}
    for shapes in (keys_a, keys_b, a.get("{?}", {}), b.get("{?}", {})):
        for k, v in shapes.items():
            if k not in both:
                optional[k] = merge(optional.get(k), v)
    return {"{}": both, "{?}": optional} if optional else {"{}": both}


def conforms(shape: Any, template: Any, where: str = "$") -> list[str]:
    """Where `shape` departs from `template`, in words (JSON-path-like), [] when it conforms."""
    if template == ANY or shape is None or template is None or shape == template:
        return []
    if _is_list(shape) and _is_list(template):
        return conforms(shape["[]"], template["[]"], f"{where}[]")
    if not (_is_object(shape) and _is_object(template)):
        return [f"{where}: {_kind(shape)}, expected {_kind(template)}"]
    have, want, optional = shape["{}"], template["{}"], template.get("{?}", {})
    found = [f"{where}.{k}: missing" for k in want if k not in have]
    for key, value in have.items():
        if key in want or key in optional:
            found += conforms(value, want.get(key, optional.get(key)), f"{where}.{key}")
        else:
            found.append(f"{where}.{key}: not expected")
    return found


def _is_object(shape: Any) -> bool:
    return isinstance(shape, dict) and "{}" in shape


def _is_list(shape: Any) -> bool:
    return isinstance(shape, dict) and "[]" in shape


def _kind(shape: Any) -> str:
    if isinstance(shape, dict):
        return "an object" if "{}" in shape else "a list"
    return str(shape)


@dataclass(frozen=True)
class Template:
    """What every model's answer to one route must hold, learnt from the first model's two."""

    mode: str  # shape or exact
    json: Any = None  # the JSON shape, where the route answers JSON
    parts: tuple[str, ...] = ()  # the stable text, in order, a gap between consecutive parts
    gap_first: bool = False  # the text may start with a gap
    gap_last: bool = False
    varied: str = ""  # how the route varied by itself, in words ("" = it did not)

    def check(self, text: str) -> str:
        """'' where `text` (read by `own_address_read`) fits, else the difference in words."""
        if self.json is not None:
            try:
                found = conforms(json_shape(json.loads(text)), self.json)
            except ValueError:
                return "not JSON"
            return "; ".join(found[:SHOWN]) + (" ..." if len(found) > SHOWN else "")
        if self.mode == "shape":
            text = VALUE.sub("0", text)
        return _fits(text, self.parts, self.gap_first, self.gap_last)


def learn(first: str, second: str, content_type: str, mode: str) -> Template:
    """The template of a route from the first model's two answers (read by `own_address_read`)."""
    if mode == "shape" and is_json(content_type):
        try:
            a, b = json_shape(json.loads(first)), json_shape(json.loads(second))
        except ValueError:
            pass
        else:
            words = "" if first == second else "its JSON values (keys and types compared)"
            if a != b:
                words = "its JSON shape: " + "; ".join(conforms(b, a)[:SHOWN])
            return Template(mode, json=merge(a, b), varied=words)
    raw_differs = first != second
    if mode == "shape":
        first, second = VALUE.sub("0", first), VALUE.sub("0", second)
    if first == second:
        return Template(mode, parts=(first,), varied=VALUES_VARIED if raw_differs else "")
    parts, gap_first, gap_last, spans = _stable(TOKENS.findall(first), TOKENS.findall(second))
    shown = ", ".join(f"{a[:24]!r} then {b[:24]!r}" for a, b in spans[:SHOWN])
    more = f" and {len(spans) - SHOWN} more" if len(spans) > SHOWN else ""
    varied = f"{len(spans)} span(s) of its text: {shown}{more}"
    if mode == "exact":  # said, but compared all the same: the user asked for identical bodies
        return Template(mode, parts=(first,), varied=f"{varied} (compared all the same)")
    return Template(mode, parts=parts, gap_first=gap_first, gap_last=gap_last, varied=varied)


def _stable(
    a: list[str], b: list[str]
) -> tuple[tuple[str, ...], bool, bool, list[tuple[str, str]]]:
    """The token runs both answers share, in order; whether a gap opens and closes the text; the
    spans that differ (first answer's, second's)."""
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    mid_a, mid_b = a[head : len(a) - tail], b[head : len(b) - tail]
    blocks = _matching(mid_a, mid_b)
    runs: list[str] = ["".join(a[:head])]
    spans: list[tuple[str, str]] = []
    at_a = at_b = 0
    for i, j, n in blocks:
        if (i, j) != (at_a, at_b):
            spans.append(("".join(mid_a[at_a:i]), "".join(mid_b[at_b:j])))
            runs.append("")  # a gap, then the next stable run
        runs[-1] += "".join(mid_a[i : i + n])
        at_a, at_b = i + n, j + n
    runs[-1] += "".join(a[len(a) - tail :])
    gap_first, gap_last = runs[0] == "", runs[-1] == ""
    return tuple(r for r in runs if r), gap_first, gap_last, spans


def _matching(a: list[str], b: list[str]) -> list[tuple[int, int, int]]:
    """(i, j, n): a[i:i+n] == b[j:j+n], in order, ending with (len(a), len(b), 0). As many
    tokens on both sides (ids, tokens and timestamps that vary in place): position by position,
    in linear time; else difflib up to MAX_DIFF_TOKENS; beyond that, one gap."""
    if len(a) == len(b):
        blocks, start = [], 0
        for i, (x, y) in enumerate([*zip(a, b, strict=True), ("", "-")]):
            if x != y:
                blocks += [(start, start, i - start)] if i > start else []
                start = i + 1
        return [*blocks, (len(a), len(b), 0)]
    if max(len(a), len(b)) <= MAX_DIFF_TOKENS:
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        return [(m.a, m.b, m.size) for m in matcher.get_matching_blocks()]
    return [(len(a), len(b), 0)]


def _fits(text: str, parts: tuple[str, ...], gap_first: bool, gap_last: bool) -> str:
    """'' where `text` is `parts` in order with anything in the gaps between them (and before
    the first or after the last where those gaps open or close it), else where it departs.
    Each part at its leftmost place: with gaps that take anything, that never misses a fit."""
    if not parts:
        return "" if gap_first or gap_last or not text else f"expected nothing, got {text[:40]!r}"
    if len(parts) == 1 and not gap_first and not gap_last:
        return "" if text == parts[0] else _near(text, parts[0], 0)
    if not gap_first and not text.startswith(parts[0]):
        return _near(text, parts[0], 0)
    at = 0
    last = len(parts) - 1
    for i, part in enumerate(parts):
        if i == last and not gap_last:
            end = len(text) - len(part)
            return "" if end >= at and text.endswith(part) else _near(text, part, at)
        found = text.find(part, at)
        if found < 0:
            return _near(text, part, at)
        at = found + len(part)
    return ""


def _near(text: str, part: str, at: int) -> str:
    return f"expected {part[:40]!r} after character {at}, got {text[at : at + 40]!r}"
