"""Confidence levels in words: the family's per-look levels must not read as "100%"."""

import pytest

from perfscope.stats import confidence_text


@pytest.mark.parametrize(("level", "text"), [(0.95, "95%"), (0.99, "99%"), (0.9982, "99.8%"), (0.99995, "99.995%"),
                                             (0.999999, "99.9999%")])
def test_a_level_is_shown_with_the_digits_that_keep_it_below_100(level, text):
    assert confidence_text(level) == text
