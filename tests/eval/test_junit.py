"""Reading a JUnit report by SWE-bench's test ids."""

from __future__ import annotations

from errand.eval.junit import junit_key, outcomes, parse_junit

JUNIT = b"""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_one" time="0.01"/>
<testcase classname="tests.test_b.TestB" name="test_two[x]" time="0.01"><failure message="boom"/></testcase>
<testcase classname="tests.test_a" name="test_zero" time="0.01"><skipped/></testcase>
<testcase classname="tests.test_a" name="test_one" time="0.01"><error message="teardown"/></testcase>
</testsuite></testsuites>"""


def test_junit_outcomes_by_swe_bench_test_id() -> None:
    assert junit_key("tests/test_b.py::TestB::test_two[x]") == ("tests.test_b.TestB", "test_two[x]")
    found = outcomes(parse_junit(JUNIT), ["tests/test_a.py::test_one", "tests/test_b.py::TestB::test_two[x]",
                                          "tests/test_a.py::test_zero", "tests/test_a.py::test_gone"])
    assert found == {"tests/test_a.py::test_one": "error", "tests/test_b.py::TestB::test_two[x]": "failed",
                     "tests/test_a.py::test_zero": "skipped", "tests/test_a.py::test_gone": "missing"}
    assert parse_junit(b"not xml <") == {}
