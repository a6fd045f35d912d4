"""Named layouts of a round's vector: the one description both the device encoder and the server decoder use.

A `Layout` is an ordered list of named segments, each an array of a fixed shape, laid out one after the
other (row-major within a segment). The device builds its contribution with `pack(name=array, …)`; the
server reads the aggregate back with `view(vector)[name]`, so the offsets are written in one place.

    layout = Layout.of(counts=3, firsts=3, histograms=(3, 4), weight=())
    vec = layout.pack(counts=c, firsts=f, histograms=h, weight=w)   # length layout.dim = 19
    layout.view(vec)["histograms"]                                   # shape (3, 4)

A shape `()` is a scalar segment (one entry).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from queries.kind import QueryKindError


@dataclass(frozen=True)
class Segment:
    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Layout:
    segments: tuple[Segment, ...]

    @classmethod
    def of(cls, **shapes: int | tuple[int, ...]) -> Layout:
        """Segments in keyword order; an int n is the shape (n,)."""
        segments, offset = [], 0
        for name, shape in shapes.items():
            dims = (shape,) if isinstance(shape, int) else tuple(shape)
            if any(d < 0 for d in dims):
                raise ValueError(f"layout: segment {name!r} has a negative dimension {dims}")
            segments.append(Segment(name, dims, offset))
            offset += math.prod(dims)
        return cls(tuple(segments))

    @property
    def dim(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.segments)

    def __getitem__(self, name: str) -> Segment:
        for s in self.segments:
            if s.name == name:
                return s
        raise KeyError(name)

    def pack(self, **parts: ArrayLike) -> np.ndarray:
        """The flat vector holding every segment (each given exactly once, in its shape). Integer parts
        give an int64 vector; any float part gives a float64 one (for encoders that quantise the whole
        vector at once)."""
        if set(parts) != set(self.names):
            missing, extra = set(self.names) - set(parts), set(parts) - set(self.names)
            raise ValueError(f"layout: missing segments {sorted(missing)}, unknown segments {sorted(extra)}")
        arrays = {name: np.asarray(value) for name, value in parts.items()}
        for s in self.segments:
            if arrays[s.name].shape != s.shape:
                raise ValueError(f"layout: segment {s.name!r} has shape {arrays[s.name].shape}, expected {s.shape}")
        floating = any(np.issubdtype(a.dtype, np.floating) for a in arrays.values())
        out = np.zeros(self.dim, dtype=np.float64 if floating else np.int64)
        for s in self.segments:
            out[s.offset : s.offset + s.size] = arrays[s.name].reshape(-1)
        return out

    def view(self, vector: ArrayLike, what: str = "vector") -> Mapping[str, np.ndarray]:
        """Each segment of `vector` (views in their shapes, scalars as 0-d arrays); QueryKindError naming
        `what` when the length is wrong."""
        vec = np.asarray(vector)
        if vec.shape != (self.dim,):
            raise QueryKindError(f"{what}: expected length {self.dim}, got shape {vec.shape}")
        return {s.name: vec[s.offset : s.offset + s.size].reshape(s.shape) for s in self.segments}
