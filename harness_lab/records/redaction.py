"""Secrets never reach the store: every text a checkpoint writes passes a :class:`Redactor`.

``contract.memory.exclude`` names what must not persist; its secret categories
(:data:`SECRET_CATEGORIES`) switch on the patterns below (private keys, cloud and API keys, bearer
tokens, ``password=...`` style pairs) and the values of secret-named environment variables. A match
becomes ``[REDACTED]``, keeping a pair's key. The patterns are written for JSON-escaped text, which is
what every stored row holds. :meth:`Redactor.clean` answers "no match" for a loop's rows at the cost
of one hash each, from a memo of the JSON pieces it found clean before.

The same redactor stands at every other output: ``run``/``resume``'s printed steps (``--json`` or
not) and the dashboard pass a run's records through :meth:`Redactor.model` and its texts through
:meth:`Redactor.text`, so what is shown is what the store keeps. A credential the harness was *given*
(an endpoint's key) is known exactly, not by its shape: :class:`SecretMask` masks it, and any piece of
it a cut left, in what a proposer returns or records.
"""

from __future__ import annotations

import json
import os
import re
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # standard library only at run time (the transcript module stays so)
    from pydantic import BaseModel

__all__ = ["SECRET_CATEGORIES", "Redactor", "SecretMask", "redact", "redactor_for"]

_M = TypeVar("_M", bound="BaseModel")

# memory.exclude entries that name a kind of secret (seed 000: "secrets, raw_credentials").
SECRET_CATEGORIES = frozenset({"secrets", "raw_credentials", "credentials", "api_keys", "tokens", "passwords"})
# Where a token may start: after a non-word character, or right after a JSON escape (``\n``, ``\t``,
# ``\u00e9``...), whose last character is a word character in the stored text: ``\b`` alone let
# "found\nsk-..." through.
_START = r"(?:(?<!\w)|(?<=\\[nrtbf])|(?<=\\u[0-9A-Fa-f]{4}))"
_SPACE = r"(?:\s|\\[nrt])"  # whitespace, also as it is spelled inside a JSON string
_QUOTE_MARK = r"\\*\""  # a quote, as it is spelled at any depth of JSON in JSON
_QUOTE = "(?:" + _QUOTE_MARK + ")?"
# A character of an unquoted value, or a \u escape. The value ends at a space, a line's end, a quote,
# a "\" escape, ";", "&" or a closing bracket (of the JSON it is a number in); it holds commas but
# neither starts nor ends with one (nor starts with an opening bracket), so "password=ab,cdef" goes
# whole and '"token": 1234, "n": 1}' keeps its JSON.
_BARE = r"(?:[^\s\"\\;&}\]]|\\+u[0-9A-Fa-f]{4})"
_BARE_FIRST = r"(?:[^\s\"\\,;&}\]{\[]|\\+u[0-9A-Fa-f]{4})"
# An HTTP authorization scheme after a key ("Authorization: Basic ..."): kept, its credential goes.
_SCHEME = r"(?:(?i:basic|bearer|digest|negotiate|ntlm|token) +)?"
_SECRET_PATTERNS = (
    # within one JSON string; a key without its END line (a one-line description shows 60 characters
    # of an argument) as far as its base64 body goes
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[^\"]*?-----END [A-Z ]*PRIVATE KEY-----|(?:[A-Za-z0-9+/=\s]|\\+[nr])*)",
    _START + r"AKIA[0-9A-Z]{16}\b",
    _START + r"sk-[A-Za-z0-9_-]{16,}",
    _START + r"(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}",
    _START + r"(?i:bearer" + _SPACE + r"+[A-Za-z0-9._~+/-]{8,}=*)",
    # key = value / "key": "value", also in JSON-escaped text at any depth (a checkpoint holds JSON in
    # JSON: the gates' fingerprints), where a quote follows any run of backslashes: keep the key (and
    # an opening quote), drop the value. A quoted value runs to its closing quote or the line's end
    # (spaces, commas, escapes such as \u00e9 included; whole backslash runs, so the JSON stays valid;
    # never ending at ",": see clean; not starting like what follows a JSON string, as in
    # '"token:", "n": 1', whose quote closes a string); a bare one to a space or separator.
    # An escaped quote inside the value (a quote after an odd backslash run at depth 0, 4k+3 at depth 1,
    # 8k+7 at depth 2: twice the opening quote's backslashes plus one, modulo twice them plus two) is
    # part of it; a shallower string's closing quote (fewer backslashes) is not.
    r"(?P<k>(?i:password|passwd|pwd|api[_-]?key|(?:secret|access|private)[_-]?key|secret|token|authorization)"
    + r"(?P<kq>" + _QUOTE_MARK + r")?\s*[:=]\s*(?P<q>(?P<qb>\\*)\")?" + _SCHEME + ")"
    + r"(?(q)(?:[^\s\\\",;&}\]]|\\++(?![\"nr]))"
    + r"(?:[^\\\"\n]|\\++(?![\"nr])|(?:(?P=qb)(?P=qb)\\\\)*+(?P=qb)(?P=qb)\\\")*(?<!,)|"
    + _BARE_FIRST + _BARE + r"{2,}(?<!,))",
)
_SECRET_ENV_NAME = re.compile(r"(?i)key|token|secret|password|passwd|credential")
_REDACTED = "[REDACTED]"


# Cheap pre-check: a text none of whose pattern could match skips the regex (which scans ~30 µs/KB:
# its alternatives start with \b, so no literal prefix speeds it up). Every match of a pattern
# contains one of these literals (the key names case-folded), so the pre-check never hides a secret.
# (The dotted and dotless capital/small I match "i" under (?i) but do not case-fold to it: listed.)
_LITERALS = ("-----BEGIN ", "AKIA", "sk-", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "\u0130", "\u0131")
_KEY_NAMES = ("password", "passwd", "pwd", "api_key", "api-key", "apikey", "secret", "token", "secret_key",
              "secret-key", "secretkey", "access_key", "access-key", "accesskey", "private_key", "private-key",
              "privatekey", "authorization")
_AFTER_KEY = re.compile(r'(?:\\*")?\s*[:=]')
_SEEN_MAX = 8192  # clean pieces remembered; forgetting them all only costs one full scan
_WHOLE_MAX = 64  # whole clean texts remembered (a loop's rows take few shapes)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


class Redactor:
    def __init__(self, exclude: Iterable[str]) -> None:
        self.exclude = tuple(exclude)
        patterns: list[str] = []
        self._values: list[str] = []
        if SECRET_CATEGORIES & set(self.exclude):
            patterns += _SECRET_PATTERNS
            # Values of secret-named environment variables (an endpoint key, a token) never persist.
            self._values = sorted((v for k, v in os.environ.items()
                                   if _SECRET_ENV_NAME.search(k) and len(v) >= 8 and not {'"', "\\"} & set(v)),
                                  key=len, reverse=True)
            patterns += [re.escape(v) for v in self._values]
        self._re = re.compile("|".join(f"(?:{p})" for p in patterns), re.DOTALL) if patterns else None
        self.inert = self._re is None
        self._seen: set[bytes] = set()  # JSON pieces known to hold no match (see clean)
        self._whole: set[bytes] = set()  # ... and whole JSON texts

    @property
    def digit_blind(self) -> bool:
        """Whether :meth:`clean` reads only the text with its digits as ``0`` (no environment values
        to look for, which may hold digits): two texts equal but for their digits, digit for digit,
        are both clean or both not."""
        return not self._values

    def __call__(self, text: str) -> str:
        if self._re is None or not self._may_hold_secret(text) or self._re.search(text) is None:
            return text
        return self._re.sub(_replace, text)

    def text(self, text: str) -> str:
        """``text`` (plain, not JSON) redacted as the store redacts it: through its JSON string form,
        which the patterns are written for."""
        if self._re is None:
            return text
        escaped = json.dumps(text, ensure_ascii=False)
        redacted = self(escaped)
        return text if redacted is escaped else str(json.loads(redacted))

    def model(self, record: _M) -> _M:
        """``record`` itself when its JSON holds no secret; else a copy read back from its redacted
        JSON (what a store row holds: a record shown from it is the record ``trace`` shows)."""
        if self._re is None:
            return record
        text = record.model_dump_json()
        redacted = self.json(text)
        return record if redacted is text else type(record).model_validate_json(redacted)

    def json(self, text: str) -> str:
        """``self(text)`` for JSON text, checking only the parts of it not seen clean before."""
        return text if self.clean(text) else self(text)

    def clean(self, text: str) -> bool:
        """Whether no pattern matches ``text``, from a memo of its pieces between ``,"``: no match
        of a pattern (the env values aside, checked whole) contains ``,"``, ends at ``,`` or starts
        at ``"``, so every match lies in one piece (and its ``\\b`` sees the same neighbours). Digits
        are read as ``0`` first: every pattern's class that holds a digit holds them all (env values
        aside), so a piece matches iff its digit-blind copy does, and step numbers, counters and
        timings stop making pieces new. A step's JSON then repeats nearly all of the last one's
        pieces: only the new ones are scanned, joined into one text, once."""
        if self._re is None:
            return True
        if self._values and any(v in text for v in self._values):
            return False
        blind = text.encode().translate(_DIGITS_AS_ZERO)
        if blind in self._whole:  # a loop's rows repeat whole, digits aside
            return True
        new = set(blind.split(b',"'))
        new -= self._seen
        if len(self._whole) >= _WHOLE_MAX:
            self._whole.clear()
        if not new:
            self._whole.add(blind)
            return True
        joined = b',"'.join(new).decode()  # the same argument: its matches are the pieces' matches
        if self._may_hold_secret(joined) and self._re.search(joined) is not None:
            return False
        if len(self._seen) > _SEEN_MAX:
            self._seen.clear()
        self._seen |= new
        self._whole.add(blind)
        return True

    def _may_hold_secret(self, text: str) -> bool:
        if any(lit in text for lit in _LITERALS) or any(v in text for v in self._values):
            return True
        folded = text.casefold()  # what (?i:...) matches, case-folded, is found here
        if "bearer" in folded:
            return True
        for name in _KEY_NAMES:
            at = folded.find(name)
            while at >= 0:
                if _AFTER_KEY.match(folded, at + len(name)):
                    return True
                at = folded.find(name, at + 1)
        return False


def _replace(m: re.Match[str]) -> str:
    # A bare value after a quoted key is a JSON number, true, false or null: the mark is quoted with the
    # key's quote (at its depth), so the JSON stays JSON (a bare [REDACTED] made the row unreadable).
    quote = m.group("kq") if m.group("q") is None else None
    return (m.group("k") or "") + (f"{quote}{_REDACTED}{quote}" if quote else _REDACTED)


_OWNED: weakref.WeakKeyDictionary[Any, tuple[tuple[str, ...], Redactor]] = weakref.WeakKeyDictionary()


def redactor_for(owner: Any, exclude: Iterable[str]) -> Redactor:
    """One :class:`Redactor` per ``owner`` (a run an output shows) and ``exclude``, kept while the owner
    lives: each step printed or redrawn reuses its memo of clean texts. An owner that takes no weak
    reference gets a new one each call."""
    key = tuple(exclude)
    try:
        held = _OWNED.get(owner)
    except TypeError:
        return Redactor(key)
    if held is None or held[0] != key:
        held = _OWNED[owner] = (key, Redactor(key))
    return held[1]


_MASK = "***"
_PIECE = 8  # the shortest cut piece of a known secret masked (shorter ones are too likely elsewhere)


class SecretMask:
    """Known secrets (an API key given in a config, not only found in the environment) masked as
    ``***`` wherever they appear: whole, JSON-escaped, and every piece of one at least 8 characters
    long (an endpoint that echoes a header cut short, a window of a log line); "Bearer KEY" keeps its
    "Bearer ". Secrets shorter than that are masked whole only."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = {f for s in secrets if s for f in (s, json.dumps(s)[1:-1])}
        self._whole = sorted(forms, key=len, reverse=True)
        self._pieces = sorted({f[i:i + _PIECE] for f in forms if len(f) > _PIECE
                               for i in range(len(f) - _PIECE + 1)})

    def __bool__(self) -> bool:
        return bool(self._whole)

    def __call__(self, text: str) -> str:
        spans = []
        for needle in (*self._whole, *self._pieces):
            at = text.find(needle)
            while at >= 0:
                spans.append((at, at + len(needle)))
                at = text.find(needle, at + 1)
        if not spans:
            return text
        spans.sort()
        out: list[str] = []
        last = 0
        for start, end in spans:  # overlapping pieces of one cut key merge into one mask
            if start > last or not out:
                out += [text[last:start], _MASK]
            last = max(last, end)
        out.append(text[last:])
        return "".join(out)

    def walk(self, value: Any) -> Any:
        """``value`` with every string in it masked, dict keys included (lists, tuples and dicts walked)."""
        if not self._whole:
            return value
        if isinstance(value, str):
            return self(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.walk(v) for v in value)
        if isinstance(value, dict):
            return {self.walk(k): self.walk(v) for k, v in value.items()}
        return value


def redact(text: str, exclude: Iterable[str]) -> str:
    """``text`` with every secret of the excluded categories replaced by ``[REDACTED]``."""
    return Redactor(exclude)(text)
