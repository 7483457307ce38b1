"""Hypothesis strategies shared by the tests of more than one module."""

from __future__ import annotations

from hypothesis import strategies as st

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)
"""Values a task may return: JSON's, with tuples (stored as lists) and nesting."""
