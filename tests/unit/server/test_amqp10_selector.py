"""JMS selectors (``server/amqp10/selector.py``): each construct against a table of
messages, SQL's three-valued logic with missing properties, and bad selectors refused."""

from __future__ import annotations

import pytest

from leveret.server.amqp10.selector import SelectorError, parse

# Left out of the compiled pass (scripts/test): the selector parser is not compiled.
pytestmark = pytest.mark.pure_only

MESSAGE: dict[str, object] = {
    "colour": "green",
    "size": 7,
    "weight": 2.5,
    "urgent": True,
    "name": "a_b%c",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("colour = 'green'", True),
        ("colour = 'red'", False),
        ("colour <> 'red'", True),
        ("Colour = 'green'", False),  # identifiers are case-sensitive: Colour is missing
        ("size > 5 AND weight < 3", True),
        ("size > 7 or weight >= 2.5", True),
        ("NOT size = 7", False),
        ("size * 2 + 1 = 15", True),
        ("size / 2 = 3", True),  # exact division of exact numerics
        ("-size < 0", True),
        ("size BETWEEN 5 AND 10", True),
        ("size NOT BETWEEN 5 AND 10", False),
        ("colour IN ('red', 'green')", True),
        ("colour NOT IN ('red', 'green')", False),
        ("colour LIKE 'gr%'", True),
        ("colour LIKE 'gr_en'", True),
        ("colour LIKE 'g'", False),
        ("name LIKE 'a\\_b\\%c' ESCAPE '\\'", True),
        ("name LIKE 'a\\_b\\%d' ESCAPE '\\'", False),
        ("missing IS NULL", True),
        ("colour IS NOT NULL", True),
        ("urgent = TRUE", True),
        ("urgent", True),
        ("(colour = 'red' OR size = 7) AND urgent = true", True),
        # Unknown (a missing property, or values of different types) never selects ...
        ("missing = 'x'", False),
        ("NOT missing = 'x'", False),
        ("colour = 7", False),
        ("colour > 'a'", False),  # strings are not ordered
        # ... but three-valued logic lets a known side decide.
        ("missing = 'x' OR size = 7", True),
        ("missing = 'x' AND size = 8", False),
        ("NOT (missing = 'x' AND size = 8)", True),
        ("JMSPriority = 4", False),
    ],
)
def test_selector_on_a_message(text: str, expected: bool) -> None:
    assert parse(text).matches(MESSAGE.get) is expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "colour =",
        "colour = 'green",
        "size BETWEEN 1",
        "x IN (1, 2)",
        "a LIKE b",
        "(a = 1",
        "a ! 1",
        "a NOT = 1",
    ],
)
def test_bad_selectors_are_refused(text: str) -> None:
    with pytest.raises(SelectorError):
        parse(text)
