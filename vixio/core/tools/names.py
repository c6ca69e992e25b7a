"""Public tool names the model APIs accept, mapped both ways per session.

OpenAI-style function names must match `^[A-Za-z0-9_-]{1,64}$`; device tools are dotted
(`self.audio_speaker.set_volume`), MCP servers may use any characters, and two sources may
offer the same name. The mapper gives each tool a stable, unique, ASCII public name:

- every character outside `[A-Za-z0-9_-]` becomes `_` (CJK included: the APIs reject it);
- a name that collides with another tool's, is too long, or has no ASCII letter or digit left
  is cut and suffixed with `_` + 8 hex digits of sha1(origin + NUL + original name).

Descriptions are rewritten too: device tools refer to each other by original name ("call
self.camera.take_photo first"), and the model must see the names it can call.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

MAX_NAME_LENGTH = 64
_NAME_CHARS = "A-Za-z0-9_.-"
_WORD = re.compile(rf"[{_NAME_CHARS}]+")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def is_safe_name(name: str) -> bool:
    return bool(_SAFE.match(name))


def sanitize(name: str) -> str:
    """The plain sanitised form (no uniqueness guarantee)."""
    return _UNSAFE.sub("_", name)


def hashed_name(base: str, original: str, origin: str = "") -> str:
    digest = hashlib.sha1(f"{origin}\0{original}".encode()).hexdigest()[:8]
    stem = base.strip("_")[: MAX_NAME_LENGTH - 9] or "tool"
    return f"{stem}_{digest}"


class ToolNameMapper:
    """Original (origin, name) ↔ public name for one session's tools."""

    def __init__(self) -> None:
        self._public: dict[tuple[str, str], str] = {}
        self._original: dict[str, tuple[str, str]] = {}
        self._renames: dict[str, str] = {}
        self._pattern: re.Pattern[str] | None = None

    def assign(self, tools: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """Public names for `(origin, original name)` pairs, keeping names already given out.

        Tools no longer listed are forgotten. Assignment is deterministic: the same tools in
        the same order get the same names in every session.
        """
        wanted = list(dict.fromkeys(tools))
        listed = set(wanted)
        keep = {key: name for key, name in self._public.items() if key in listed}
        used = set(keep.values())
        for key in wanted:
            if key in keep:
                continue
            origin, original = key
            base = sanitize(original)
            name = base
            if name in used or len(name) > MAX_NAME_LENGTH or not re.search(r"[A-Za-z0-9]", name):
                name = hashed_name(base, original, origin)
            while name in used:  # a hash collision on top of a name collision: vanishingly rare
                name = hashed_name(name, original + "'", origin)
            keep[key] = name
            used.add(name)
        self._public = keep
        self._original = {name: key for key, name in keep.items()}
        self._renames = {orig: pub for (_, orig), pub in keep.items() if orig != pub}
        self._pattern = _rename_pattern(self._renames)
        return dict(keep)

    def public(self, original: str, origin: str = "") -> str | None:
        return self._public.get((origin, original))

    def original(self, public: str) -> tuple[str, str] | None:
        """(origin, original name) of a public name."""
        return self._original.get(public)

    def rewrite(self, text: str) -> str:
        """Replace every original name in `text` by its public name (longest names first).

        A name counts where it stands alone: not inside a longer name (`self.audio` is not
        rewritten in `self.audio_speaker` or `self.audio.volume`), sentence punctuation after it
        is fine ("call self.camera.take_photo.")."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        odd = match.group(1) if match.re.groups else None
        if odd is not None:
            return self._renames[odd]
        token = match.group(0)
        public = self._renames.get(token)
        if public is not None:
            return public
        stem = token.rstrip(".")  # the name, then the sentence's full stop(s)
        public = self._renames.get(stem) if stem != token else None
        return token if public is None else public + token[len(stem) :]


def _rename_pattern(renames: dict[str, str]) -> re.Pattern[str] | None:
    """One pattern for every description of a tool list.

    Names of name characters only (dotted device names, the usual case) are found as whole
    tokens of those characters and looked up, so the cost does not grow with the number of
    tools; only names with other characters (spaces, CJK) go into an alternation, tried first.
    """
    if not renames:
        return None
    odd = sorted((name for name in renames if not _WORD.fullmatch(name) or name.endswith(".")), key=len, reverse=True)
    alternation = "|".join(re.escape(name) for name in odd)
    head = rf"(?<![{_NAME_CHARS}])"
    if alternation:
        return re.compile(rf"{head}(?:({alternation})(?![A-Za-z0-9_-]|\.[A-Za-z0-9_])|[{_NAME_CHARS}]+)")
    return re.compile(rf"{head}[{_NAME_CHARS}]+")
