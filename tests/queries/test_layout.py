"""queries.layout: named segments pack and view back exactly; wrong shapes and lengths are refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from queries.kind import QueryKindError, value_path
from queries.layout import Layout

shapes = st.one_of(st.just(()), st.tuples(st.integers(0, 4)), st.tuples(st.integers(0, 3), st.integers(0, 3)))


@given(st.lists(shapes, min_size=1, max_size=5), st.integers(0, 2**32 - 1))
def test_pack_then_view_gives_every_segment_back(segment_shapes, seed):
    rng = np.random.default_rng(seed)
    layout = Layout.of(**{f"s{i}": shape for i, shape in enumerate(segment_shapes)})
    parts = {f"s{i}": rng.integers(-(2**40), 2**40, size=shape) for i, shape in enumerate(segment_shapes)}
    vec = layout.pack(**parts)
    assert vec.dtype == np.int64 and vec.shape == (layout.dim,) == (sum(int(np.prod(s)) for s in segment_shapes),)
    view = layout.view(vec)
    for name, part in parts.items():
        assert view[name].shape == part.shape and np.array_equal(view[name], part)
    assert np.array_equal(np.concatenate([np.ravel(p) for p in parts.values()]), vec)  # in keyword order


def test_float_parts_give_a_float_vector_and_offsets_are_named():
    layout = Layout.of(loss=(), metrics=2, weight=())
    vec = layout.pack(loss=0.5, metrics=np.array([0.25, 0.75]), weight=1.0)
    assert vec.dtype == np.float64 and vec.tolist() == [0.5, 0.25, 0.75, 1.0]
    assert layout["weight"].offset == 3 and layout.names == ("loss", "metrics", "weight")
    assert float(layout.view(vec)["weight"]) == 1.0


def test_wrong_segments_shapes_and_lengths_are_refused():
    layout = Layout.of(a=2, b=(2, 2))
    with pytest.raises(ValueError, match="missing segments \\['b'\\]"):
        layout.pack(a=[1, 2])
    with pytest.raises(ValueError, match="unknown segments \\['c'\\]"):
        layout.pack(a=[1, 2], b=np.zeros((2, 2), dtype=np.int64), c=[1])
    with pytest.raises(ValueError, match="'b' has shape \\(4,\\)"):
        layout.pack(a=[1, 2], b=np.zeros(4, dtype=np.int64))
    with pytest.raises(QueryKindError, match="aggregate: expected length 6"):
        layout.view(np.zeros(7), "aggregate")


def test_value_path_is_a_json_pointer():
    assert value_path("counts", "a/b~c") == "/counts/a~1b~0c"
    assert value_path("heavy_hitters", 0, "count") == "/heavy_hitters/0/count"
