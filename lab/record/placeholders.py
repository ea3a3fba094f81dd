"""Values that never collide: placeholders in a route's path, headers and body, filled per request.

A write with a unique constraint (an email, an order number, an idempotency key) answers 409 or
500 from its second request on when every request sends the same bytes, and the sweep would then
measure the error path. So a route's text may hold placeholders, each filled anew per request:

- `{uuid}`: a random UUID (version 4);
- `{n}`: a number no other request of the run sends: each generator process counts up by the
  number of generator processes, from its own index (generator i of k sends i, i + k, i + 2k, ...
  above the step's base), and each step's base lies above every earlier step's values;
- `{user}`: the simulated user's number (closed loop: each user's own, unique across generator
  processes; open loop: the arrivals take turns over the cap's numbers);
- `{choice:a|b|c}`: one of the listed values, drawn per request;
- `{line:FILE}`: one line of FILE (ids to read, search terms), drawn per request; FILE relative to
  the directory `lab run` runs in, or, in a mix file, to the mix file (as its `body_file` is; the
  lab writes it there as an absolute path: `anchored`); a generator on another machine needs it at
  the same path.

One request's placeholders share their values: `PUT /items/{uuid}` with a body naming `{uuid}`
sends the same UUID in both. Why this syntax cannot clash with a JSON body: a placeholder is a
brace followed by a letter, and a JSON object's brace is followed by a quote, a space, a newline
or the closing brace. Any other `{word}` or `{word:...}` is refused as an unknown placeholder, in
any case or spelling (`{UUID}`, `{orderId}`, `{order-id}`: a path copied from an OpenAPI page is
never sent with its braces), and so is a brace and a letter left unclosed (`{uuid`); `{{` sends
one `{` (compact GraphQL, say).

Why compiled: a template is split once into its literal parts and its placeholders, so a request
costs one join; a text without any placeholder is sent as the very same string.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from lab.record.errors import LabError
from lab.record.login import Login

NAMES = ("uuid", "n", "user", "choice", "line")
WORDS = "{uuid}, {n}, {user}, {choice:a|b|c}, {line:FILE}"
# {n} in the sweep: each step's base is CHECK_VALUES + this many per second since the lab started,
# so a step's values stay below the next step's while the generators send fewer requests a second
# than this, all together; the check's own values count from 1, below CHECK_VALUES.
N_PER_SECOND = 100_000
CHECK_VALUES = 1_000_000
MAX_LINES_BYTES = 16_000_000  # a list of ids or search terms; anything bigger is a mistake
# `{{`, or a brace, a letter and the rest of a word (any case, digits, `_`, `-`), its `:values`,
# and its closing brace, which group 3 holds empty when it is missing (refused as unclosed)
_TOKEN = re.compile(r"\{\{|\{([A-Za-z][A-Za-z0-9_-]*)(?::([^{}]*))?(\}?)")
_OPENS = re.compile(r"\{(?=[A-Za-z{])")  # a brace _TOKEN would read as a token's start
_PATH_SAFE = "/?&=:@!$'()*+,;%-._~"


@dataclass(frozen=True)
class Slot:
    """One placeholder of a template: its key (its text: one value per request and key), its
    kind, and the values a `choice` or `line` draws from."""

    key: str
    kind: str
    values: tuple[str, ...] = ()


Part = str | Slot


@dataclass(frozen=True)
class Template:
    """A text compiled once: literal parts and placeholders; `escape` makes a drawn value safe
    where it lands (a path, a JSON body, a header)."""

    text: str
    parts: tuple[Part, ...]
    escape: str = "text"  # "text", "path", "json" or "header"

    @property
    def static(self) -> bool:
        """Sent as the very text given: no placeholder, and no `{{` to write as one `{`."""
        return self.parts == (self.text,)


def literal(text: str) -> str:
    """A text taken as it is (a recorded HAR's path, header or body) as a template that sends it
    unchanged: every `{` that would start a token doubled, whatever follows it."""
    return _OPENS.sub("{{", text)


def compile_text(text: str, where: str, escape: str = "text") -> Template:
    """`text` split into literal parts and placeholders; LabError naming `where` and the fix for
    an unknown placeholder, an empty choice or a line file that cannot be read."""
    parts: list[Part] = []
    last = 0
    for match in _TOKEN.finditer(text):
        parts.append(text[last : match.start()])
        last = match.end()
        if match.group(0) == "{{":
            parts.append("{")
            continue
        if not match.group(3):
            raise LabError(
                f"{where}: {match.group(0)!r} opens a placeholder it never closes: write "
                f"{match.group(0)}}} (known: {WORDS}), or {{{{ for a literal {{"
            )
        parts.append(_slot(match.group(1), match.group(2), match.group(0), where))
    parts.append(text[last:])
    merged = _merge(parts)
    if all(isinstance(p, str) for p in merged) and "{{" not in text:
        return Template(text, (text,), escape)  # no placeholder: sent as the very same string
    return Template(text, tuple(merged), escape)


def _slot(name: str, arg: str | None, token: str, where: str) -> Slot:
    if name not in NAMES:
        hint = f"placeholders are lowercase: {{{name.lower()}}}; " if name.lower() in NAMES else ""
        raise LabError(
            f"{where}: unknown placeholder {token} ({hint}known: {WORDS}; a value per request is "
            f"{{n}}, {{uuid}} or {{line:ids.txt}}; write {{{{ for a literal {{)"
        )
    if name in ("choice", "line") and not arg:
        raise LabError(f"{where}: {token} needs values, e.g. {{choice:a|b}} or {{line:ids.txt}}")
    if name not in ("choice", "line") and arg is not None:
        raise LabError(f"{where}: {token}: {{{name}}} takes nothing after a colon")
    if name == "choice":
        assert arg is not None
        return Slot(token, name, tuple(arg.split("|")))
    if name == "line":
        assert arg is not None
        return Slot(token, name, read_lines(Path(arg), where))
    return Slot(token, name)


def anchored(text: str, home: Path) -> str:
    """`text` with each `{line:FILE}` whose FILE is relative made absolute under `home` (a mix
    file's directory: its files are read beside it, wherever `lab run` runs and whichever
    process fills the placeholder)."""

    def absolute(match: re.Match[str]) -> str:
        name, arg, closed = match.groups()
        if name != "line" or not arg or not closed or Path(arg).is_absolute():
            return match.group(0)
        return f"{{line:{(home / arg).resolve()}}}"

    return _TOKEN.sub(absolute, text)


def _merge(parts: list[Part]) -> list[Part]:
    """Adjacent literal parts as one, empty ones dropped."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        elif part != "":
            out.append(part)
    return out or [""]


def read_lines(path: Path, where: str) -> tuple[str, ...]:
    """The non-empty lines of a `{line:FILE}` file; LabError saying what is wrong with it."""
    try:
        if path.stat().st_size > MAX_LINES_BYTES:
            raise LabError(f"{where}: {{line:{path}}}: larger than {MAX_LINES_BYTES} bytes")
        lines = tuple(s for s in path.read_text().splitlines() if s.strip())
    except UnicodeDecodeError:
        raise LabError(f"{where}: {{line:{path}}}: not a UTF-8 text file") from None
    except OSError as e:
        raise LabError(f"{where}: {{line:{path}}}: cannot read it ({e.strerror or e})") from None
    if not lines:
        raise LabError(f"{where}: {{line:{path}}}: the file has no line to send")
    return lines


class Source:
    """One generator process's values: its counter ({n}: `base + index`, then up by `stride`),
    its draws from lists (`seed`: reproducible), and a UUID per request (never seeded: a seeded
    step run twice would send the same ones)."""

    def __init__(self, base: int = 0, index: int = 0, stride: int = 1, seed: int | None = None):
        self.counter = itertools.count(base + index, max(1, stride))
        self.rng = random.Random(seed)
        self.unique = random.Random()  # from the OS's entropy, per process

    def reseed(self, seed: int) -> None:
        """Start the draws from lists over: the check gives every model the same choices in
        the same order, so two models are compared on the same requests (a search for one
        word under one model and for another under the next differ by the app's data, not by
        the model); the counter and the UUIDs go on, never repeated."""
        self.rng.seed(seed)

    def draw(self, slot: Slot, user: int) -> str:
        if slot.kind == "uuid":
            return uuid4(self.unique.getrandbits(128))
        if slot.kind == "n":
            return str(next(self.counter))
        if slot.kind == "user":
            return str(user)
        return self.rng.choice(slot.values)


@functools.lru_cache(maxsize=1024)
def compiled(text: str, escape: str = "text") -> Template:
    """A route's text compiled once in the lab's process (checked when the route was read)."""
    return compile_text(text, "a route", escape)


def step_base(elapsed_s: float) -> int:
    """Where a step's {n} starts, `elapsed_s` after the lab started."""
    return CHECK_VALUES + round(max(0.0, elapsed_s) * N_PER_SECOND)


CHECK = Source(base=1)  # the check's own {n}: 1, 2, 3, ... below every step's (CHECK_VALUES)
CHECK_SEED = 0  # the check's draws under each model (`Source.reseed`)


def uuid4(bits: int) -> str:
    """A version-4 UUID from 128 random bits, as `uuid.UUID(int=bits, version=4)` writes it
    (the variant and version bits set), without building the object: a request's cost."""
    bits = (bits & ~(0xC000 << 48) | 0x8000 << 48) & ~(0xF000 << 64) | 4 << 76
    h = f"{bits:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


Headers = tuple[tuple[str, str], ...]
Filled = tuple[str, str | None, Headers]  # a request's path, body and headers, filled


class Values:
    """One request's values, drawn on first use and shared by its path, headers and body."""

    __slots__ = ("drawn", "source", "user")

    def __init__(self, source: Source, user: int) -> None:
        self.source, self.user = source, user
        self.drawn: dict[str, str] = {}

    def fill_text(self, text: str, escape: str) -> str:
        """A text of a route the lab read itself (the check's requests), compiled once."""
        return self.fill(compiled(text, escape))

    def fill_request(self, path: str, body: str | None, headers: Headers) -> Filled:
        """A request's path, body and headers with this request's values, each escaped where it
        lands (a JSON body's values JSON-escaped, a path's percent-encoded)."""
        if body is not None:
            body = self.fill_text(body, "json" if is_json(body) else "text")
        filled = tuple((k, self.fill_text(v, "header")) for k, v in headers)
        return self.fill_text(path, "path"), body, filled

    def fill(self, template: Template) -> str:
        if len(template.parts) == 1 and isinstance(template.parts[0], str):
            return template.parts[0]
        escape = ESCAPES[template.escape]
        out = []
        for part in template.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = self.drawn.get(part.key)
            if value is None:
                value = self.drawn[part.key] = self.source.draw(part, self.user)
            out.append(escape(value) if part.values else value)
        return "".join(out)


def login_as(login: Login, source: Source, user: int) -> Login:
    """The login as simulated user `user` sends it: its placeholders filled
    (`--login-body 'username=user{user}&password=pw'`: an account per user); itself where it has
    none."""
    if not any(found(t) for t in (login.path, login.body or "", *(v for _, v in login.headers))):
        return login
    path, body, headers = Values(source, user).fill_request(login.path, login.body, login.headers)
    return replace(login, path=path, body=body, headers=headers)


def checked_login(login: Login) -> Login:
    """The login, its placeholders checked (LabError naming an unknown one) before any load."""
    for text in (login.path, login.body or "", *(v for _, v in login.headers)):
        compile_text(text, f"the login {login.label}")
    return login


def _json(value: str) -> str:
    return json.dumps(value)[1:-1]


def _header(value: str) -> str:
    return value.replace("\r", " ").replace("\n", " ")


ESCAPES: dict[str, Callable[[str], str]] = {
    "text": str,
    "path": lambda v: urllib.parse.quote(v, safe=_PATH_SAFE),
    "json": _json,
    "header": _header,
}


def found(text: str) -> bool:
    """Whether a text holds a placeholder (or a `{{`): it varies, or needs filling, per request."""
    return _TOKEN.search(text) is not None


def is_json(body: str) -> bool:
    """Whether a body is a JSON object or array (its placeholders filled with a sample value):
    it then goes with `Content-Type: application/json` unless a header says otherwise."""
    text = body.strip()
    if not text.startswith(("{", "[")):
        return False
    sample = _TOKEN.sub(lambda m: "{" if m.group(0) == "{{" else "0", text)
    try:
        json.loads(sample)
    except ValueError:
        return False
    return True
