"""The compiled engine's state as two flat arrays: every table (region) of ints in ``I``, of floats in ``F``, each
at an offset with a row width written in I's header (sim/fast/fast_kernels.py ``at``)."""

from __future__ import annotations

import numpy as np

from meshsim.sim.fast import fast_kernels as K


class Layout:
    """Packs named tables into I and F, and gives back views of them (the compiled loop writes through these)."""

    def __init__(self, tables: dict[int, np.ndarray]) -> None:
        shapes: dict[int, tuple[int, int]] = {}
        sizes = {"int": K.HEADER, "float": 0}
        offsets: dict[int, int] = {}
        # the regions at the offsets the compiled loop fixes (OFFSETS) first, in their order
        for region in sorted(tables, key=lambda r: (K.OFFSETS[r] < 0, K.OFFSETS[r])):
            table = tables[region]
            rows, width = (table.shape[0], 1) if table.ndim == 1 else (table.shape[0], int(np.prod(table.shape[1:])))
            if K.WIDTHS[region] >= 0 and width != K.WIDTHS[region]:  # the loop would index it with its fixed width
                raise RuntimeError(f"region {region}'s rows are {width} wide, the compiled loop's WIDTHS says "
                                   f"{K.WIDTHS[region]}")
            kind = "int" if region in K.INT_REGIONS else "float"
            if K.OFFSETS[region] >= 0 and sizes[kind] != K.OFFSETS[region]:  # it would read another region there
                raise RuntimeError(f"region {region} would start at {sizes[kind]}, the compiled loop's OFFSETS says "
                                   f"{K.OFFSETS[region]}")
            offsets[region] = sizes[kind]
            shapes[region] = (rows, width)
            sizes[kind] += max(rows * width, 1)
        self.I = np.zeros(sizes["int"], dtype=np.int64)
        self.F = np.zeros(max(sizes["float"], 1))
        self.shapes = shapes
        for region, table in tables.items():
            self.I[2 * region], self.I[2 * region + 1] = offsets[region], shapes[region][1]
            self.view(region)[...] = table.reshape(shapes[region])

    def view(self, region: int) -> np.ndarray:
        """The region as a (rows, width) view of I or F."""
        rows, width = self.shapes[region]
        offset = int(self.I[2 * region])
        array = self.I if region in K.INT_REGIONS else self.F
        return array[offset:offset + rows * width].reshape(rows, width)
