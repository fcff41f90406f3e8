"""Anomaly detection: which texts and lines are unexpected results that compression must keep verbatim.

An anomaly is anything that did not go as expected: an error, a failure, a denial, a timeout, an HTTP
4xx/5xx status, a mismatch, a counterexample, or a contrast word ("but", "however", "但") that so often
marks one ("HTTP 200 but the body's code is 500"). The pattern is deliberately wide: a false positive
only costs budget (the item is kept whole), a false negative can send the run down a wrong path.

Signals, case-insensitive, matched on word boundaries::

    *error(s) *exception(s) (so AssertionError, KeyError...)  fail(s|ed|ure|ing)  traceback denied forbidden refused unauthori[sz]ed
    timeout / timed out  mismatch  unexpected  invalid  not found  panic  crash(ed)  abort(ed)
    counterexample  expected ... got  assert(ion)  but  however  although
    segmentation fault  core dumped  no such file  non-zero exit  killed by signal
    a non-zero exit code: exit code 2, exited with 137, exit status 1, rc=1, returncode: 1, "exit_status": 1
    an expected-vs-actual line: "Expected: 120", "  actual = 0", "- want: 3", "got: 4"
    a traceback's frame line: File "app.py", line 3, in main; a TAP "not ok 3 - ..." line
    HTTP/status/code (also status_code, statusCode, error_code) followed (within a few non-digits) by 4xx/5xx
    Chinese: 错误 失败 异常 超时 拒绝 不一致 不匹配 但 却 然而 报错, and in Traditional script
    錯誤 失敗 異常 超時 拒絕 報錯 卻; Japanese: エラー 失敗 異常 タイムアウト 拒否

Numeric mismatches need a comparison, not a word, so they are found by :func:`numeric_mismatch` (also part
of :func:`is_anomalous` and :func:`anomaly_lines`): two different numbers, one named the expected one, as in
"0 rows; 120 expected", "expected 120, got 0", "found 3 files instead of 5", "count 0 != 120". The same
number on both sides ("120 rows; 120 expected") is no anomaly.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["ANOMALY_PATTERN", "anomaly_lines", "is_anomalous", "numeric_mismatch"]

ANOMALY_PATTERN: re.Pattern[str] = re.compile(
    r"\b\w*(?:error|exception)s?\b|\b(?:fail(?:s|ed|ure|ures|ing)?|traceback|denied|forbidden|refused"
    r"|unauthori[sz]ed|timed?\s?outs?|mismatch(?:es|ed)?|unexpected|invalid|not found"
    r"|panic|crash(?:ed|es)?|abort(?:ed)?|counter-?examples?|assert(?:ion)?|but|however|although"
    r"|expected\b.{0,80}\bgot|segmentation fault|core dumped|no such file|non-?zero exit|killed by signal)\b"
    # a non-zero exit code (0 is success): the number after the name, not a port or a count elsewhere
    r"|\b(?:exit(?:ed)?(?:\s+with)?(?:[\s_-]?(?:code|status))?|exit_?code|return_?code|returncode|rc)['\"]?\s*[:=]?\s*"
    r"-?0*[1-9]\d*\b"
    # expected-vs-actual lines (a test runner's diff), a traceback's frame line, a TAP failure
    r"|^[ \t]*(?:[-+][ \t]*)?(?:expected|actual|want|got)(?:[ \t]+(?:value|output|result))?[ \t]*[:=]"
    r"|^[ \t]*File \"[^\"\n]+\", line \d+|^not ok\b"
    r"|\b(?:HTTP|status|(?:status|error|http|response)?[_-]?code)\b\D{0,12}\b[45]\d\d\b"
    r"|\bHTTP/\d(?:\.\d)?\s+[45]\d\d\b"
    r"|错误|失败|异常|超时|拒绝|不一致|不匹配|报错|但|却|然而"
    r"|錯誤|失敗|異常|超時|拒絕|報錯|卻|エラー|タイムアウト|拒否",
    re.IGNORECASE | re.MULTILINE,
)


# Substrings at least one of which every match contains. Substring tests run in C and are ~50x
# faster than the alternation above, so a clean text (the common case) never reaches the regex.
_PREFILTER: tuple[str, ...] = (
    "error", "fail", "exception", "traceback", "denied", "forbidden", "refused", "unauthori",
    "time", "mismatch", "unexpected", "invalid", "not found", "panic", "crash", "abort",
    "counter", "assert", "but", "however", "although", "expected", "http", "status", "code",
    "segmentation", "core dumped", "no such file", "zero exit", "killed by", "exit", "rc=", "rc:", "return",
    "actual", "want", "got", "file \"", "not ok", "should", "needed", "required", "instead of", "rather than",
    "!=", "≠",
    "错误", "失败", "异常", "超时", "拒绝", "不一致", "不匹配", "报错", "但", "却", "然而",
    "錯誤", "失敗", "異常", "超時", "拒絕", "報錯", "卻", "エラー", "タイムアウト", "拒否",
)  # fmt: skip


# An ASCII text (str.isascii is O(1)) cannot hold the Chinese signals: a third fewer tests for it.
_PREFILTER_ASCII: tuple[str, ...] = tuple(word for word in _PREFILTER if word.isascii())


def _maybe(text: str) -> bool:
    lowered = text.lower()
    for word in _PREFILTER_ASCII if text.isascii() else _PREFILTER:  # a plain loop: ~2x faster than any()
        if word in lowered:
            return True
    return False


# Short texts recur (a tool's "ok", "noted", an interaction the summarizer checks again when it folds
# it): their answers are kept, bounded, so a repeat costs a lookup (~0.1 µs) instead of the ~25
# substring tests (~1 µs). Long texts are rarely repeated and would hold memory: never kept.
_MEMO_CHARS = 256


_NUM = r"(-?\d+(?:\.\d+)?)"
# Each form captures (actual, expected) or (expected, actual) by name; the numbers are compared after.
_MISMATCH_FORMS: tuple[re.Pattern[str], ...] = (
    # "0 rows; 120 expected", "got 0 but 120 were expected"
    re.compile(rf"(?<![\w.]){_NUM.replace('(', '(?P<got>', 1)}(?![\w.])[^\d\n]{{0,40}}?(?<![\w.])"
               rf"{_NUM.replace('(', '(?P<exp>', 1)}(?![\w.])\s*(?:\w+\s+){{0,2}}?(?:were\s+|was\s+|are\s+|is\s+)?"
               r"(?:expected|wanted|required|needed)\b", re.IGNORECASE),
    # "expected 120, got 0", "Expected: 120 Actual: 0", "should be 5 but found 3"
    re.compile(rf"\b(?:expected|wanted|want|should\s+(?:be|have\s+been)|needed|required)\b\D{{0,30}}?(?<![\w.])"
               rf"{_NUM.replace('(', '(?P<exp>', 1)}(?![\w.])[^\d\n]{{0,40}}?\b(?:got|found|actual|but|received|saw|was|is)"
               rf"\b\D{{0,20}}?(?<![\w.]){_NUM.replace('(', '(?P<got>', 1)}(?![\w.])", re.IGNORECASE),
    # "3 files instead of 5", "count 0 != 120", "0 vs. 120 expected"
    re.compile(rf"(?<![\w.]){_NUM.replace('(', '(?P<got>', 1)}(?![\w.])[^\d\n]{{0,30}}?(?:\binstead\s+of\b|\brather\s+than\b|!=|≠)"
               rf"\D{{0,20}}?(?<![\w.]){_NUM.replace('(', '(?P<exp>', 1)}(?![\w.])", re.IGNORECASE),
)
_MISMATCH_HINTS = ("expected", "want", "should", "needed", "required", "instead of", "rather than", "!=", "≠")


def numeric_mismatch(text: str) -> str | None:
    """The first place where *text* names an expected number and a different actual one (the matched
    span, verbatim), or None: "0 rows; 120 expected" -> "0 rows; 120 expected"."""
    lowered = text.lower()
    for hint in _MISMATCH_HINTS:  # most texts name no expectation: no regex at all
        if hint in lowered:
            break
    else:
        return None
    for form in _MISMATCH_FORMS:
        for found in form.finditer(text):
            if float(found["got"]) != float(found["exp"]):
                return found.group(0)
    return None


def _check(text: str) -> bool:
    return _maybe(text) and (ANOMALY_PATTERN.search(text) is not None or numeric_mismatch(text) is not None)


_check_short = lru_cache(maxsize=1024)(_check)


def is_anomalous(text: str) -> bool:
    """True when any anomaly signal occurs in *text*."""
    return _check_short(text) if len(text) <= _MEMO_CHARS else _check(text)


def anomaly_lines(text: str) -> list[str]:
    """The lines of *text* that carry an anomaly signal, verbatim and in order."""
    if not _maybe(text):  # fast path: most results are clean
        return []
    # Only a line with a signal word goes through the regex (~0.2 µs a character): not the whole text first,
    # then every line again, which cost a 10 MiB output seconds.
    return [line for line in text.splitlines()
            if _maybe(line) and (ANOMALY_PATTERN.search(line) or numeric_mismatch(line) is not None)]
