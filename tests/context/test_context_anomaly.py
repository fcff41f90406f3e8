"""Anomaly detection: each documented signal flags a text, ordinary results do not."""

from __future__ import annotations

import pytest

from harness_lab.context import anomaly_lines, is_anomalous

SIGNALS = [
    "request ok but the list is empty",
    "status looks fine, however 3 rows are missing",
    "KeyError: 'port'",
    "AssertionError: expected 3, got 4",
    "ValueError raised in parse()",
    "Exception in thread main",
    "build failed after 3 steps",
    "Traceback (most recent call last):",
    "permission denied: /etc/shadow",
    "403 Forbidden",
    "connection refused",
    "timeout after 30 s",
    "request timed out",
    "checksum mismatch on app.whl",
    "unexpected token at line 3",
    "invalid YAML",
    "file not found: config.yaml",
    "HTTP 200 but body code 500",
    "HTTP/1.1 502 Bad Gateway",
    "status: 404",
    "counterexample: n=0",
    "expected 8080 got 80",
    "process crashed with SIGSEGV",
    "接口返回 200 但 body 里 code 字段是 500",
    "读取配置失败",
    "请求超时",
]
CLEAN = [
    "listed 12 files",
    "port: 8080",
    "read 40 lines from src/main.py",
    "3 passed in 0.12s",
    "row 501: value=3507",
    '{"ok": true, "items": [1, 2, 3]}',
    "distributed build output in buttons/",
    "配置文件在 config/settings.yaml",
]


@pytest.mark.parametrize("text", SIGNALS)
def test_signal_is_an_anomaly(text: str) -> None:
    assert is_anomalous(text)


@pytest.mark.parametrize("text", CLEAN)
def test_ordinary_result_is_not_an_anomaly(text: str) -> None:
    assert not is_anomalous(text)


def test_anomaly_lines_are_verbatim_and_in_order() -> None:
    text = "step 1 ok\nKeyError: 'a'\nstep 2 ok\nHTTP 200 but body code 500\n"
    assert anomaly_lines(text) == ["KeyError: 'a'", "HTTP 200 but body code 500"]
    assert anomaly_lines("all good\nfine") == []


@pytest.mark.parametrize("text", [
    '{"status_code": 500, "body": "ok"}',  # the documented status-then-4xx/5xx signal, Python's spelling
    '{"statusCode": 503}',
    "error_code=404",
    "讀取設定失敗",  # Traditional Chinese: the documented signals in the other script
    "連線錯誤",
    "請求超時",
    "接口返回 200 但 body 卻是 500",
    "設定不一致",
    "エラーが発生しました",  # Japanese
    "接続がタイムアウトしました",
    "Segmentation fault (core dumped)",
    "cat: config.yaml: No such file or directory",
    "Command returned non-zero exit status 1.",
])
def test_anomalies_in_other_spellings_and_scripts_are_anomalies(text: str) -> None:
    assert is_anomalous(text)
    assert anomaly_lines(text) == [text]


@pytest.mark.parametrize("text", ["status_code: 200", "statusCode=204", "code_review: 3 files", "zero exit status"])
def test_success_codes_in_those_spellings_stay_clean(text: str) -> None:
    assert not is_anomalous(text)
