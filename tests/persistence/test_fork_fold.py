"""What a fork (and every reader) gets back from the store's fold of delta rows and its fast parser
(``harness_lab.store.fold``): the values json.loads would read, whatever orjson would make of them."""

from __future__ import annotations

import json

import pytest

from harness_lab.store.fold import fold, loads

# orjson reads an integer past 64 bits as a float (no error): 10**29 would come back as 1e29.
LONG = [10**29, 2**64, -(10**19) + 1, -(2**63) - 1]


@pytest.mark.parametrize("value", LONG)
def test_a_delta_holding_an_integer_past_64_bits_folds_to_that_integer(value: int) -> None:
    whole = json.dumps({"kind": "checkpoint", "n": 1, "m": value})
    assert json.loads(fold(whole, [json.dumps({"n": value})])) == {"kind": "checkpoint", "n": value, "m": value}
    assert f'"n":{value}' in fold(whole, [json.dumps({"n": value})])  # spelled as an integer, not 1e+29


@pytest.mark.parametrize("text", [json.dumps(LONG), json.dumps({"p": "\udcff"}), "[NaN, -Infinity]",
                                  '{"a": "x", "a": 1.5, "b": [true, null, 18446744073709551615]}',
                                  json.dumps({"sha": "0123456789012345678901234abc", "n": 7})])
def test_loads_reads_what_json_loads_reads(text: str) -> None:
    got, want = loads(text), json.loads(text)
    assert repr(got) == repr(want) and type(got) is type(want)  # repr: nan == nan is False
