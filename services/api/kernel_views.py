"""Per-trace kernel tables served from the prepared bundle: loaded once, columnar, paged.

A ready trace's kernels are the bundle's ``kernels.npz`` (content-addressed: a bundle hash
never changes meaning). :class:`KernelViews` loads it once per hash into a
:class:`KernelView` (numpy columns plus each kernel's family and the chart totals), keeps the
few most recently used, and answers a page by slicing a cached sort order: a request never
rebuilds 100,000 row objects or reads KV.
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cascade.kerneltable import KernelTable
from cascade.platform.bundlecache import bundle_kernels, fetch_bundle
from cascade.platform.state import TraceRecord
from cascade.platform.storage import Storage
from services.api.schemas.traces import TraceTotals

#: Bundles whose kernel views one api process keeps.
MAX_VIEWS = 8
#: Orders (sort, direction, filter) kept per view.
MAX_ORDERS = 32


class KernelView:
    """One bundle's kernels as columns, with cached orders for paging."""

    def __init__(self, table: KernelTable, columns: list[str], family: np.ndarray,
                 summary: TraceTotals) -> None:
        self.size = len(table)
        self.columns = [*columns, "family"]
        self.data: dict[str, np.ndarray] = {c: np.asarray(table[c]) for c in columns}
        self.data["family"] = family
        self.summary = summary
        """Totals for charts (:func:`services.api.trace_views.view_extras`; ``trace_id`` empty)."""
        self._search: np.ndarray | None = None
        self._orders: OrderedDict[tuple[str, str, str], np.ndarray] = OrderedDict()

    def _haystack(self) -> np.ndarray:
        if self._search is None:
            names = self.data["name"].tolist() if "name" in self.data else [""] * self.size
            fams = self.data["family"].tolist()
            self._search = np.asarray([f"{n}\n{f}".lower() for n, f in zip(names, fams, strict=True)],
                                      dtype=object)
        return self._search

    def order(self, sort: str, direction: str, needle: str) -> np.ndarray:
        """Row indices matching ``needle`` (name or family), sorted by ``sort``: unknown values
        (NaN) last, ties in kernel order."""
        key = (sort, direction, needle)
        hit = self._orders.get(key)
        if hit is not None:
            self._orders.move_to_end(key)
            return hit
        rows = np.arange(self.size)
        if needle:
            hay = self._haystack()
            rows = rows[np.fromiter((needle in h for h in hay), dtype=bool, count=self.size)]
        values = self.data.get(sort)
        if values is not None and len(rows):
            picked = values[rows]
            known = ~np.isnan(picked) if picked.dtype.kind == "f" else np.ones(len(rows), bool)
            present, absent = rows[known], rows[~known]
            vals = picked[known]
            if direction == "desc":
                flipped = np.argsort(vals[::-1], kind="stable")
                idx = (len(vals) - 1 - flipped)[::-1]
            else:
                idx = np.argsort(vals, kind="stable")
            rows = np.concatenate([present[idx], absent])
        self._orders[key] = rows
        while len(self._orders) > MAX_ORDERS:
            self._orders.popitem(last=False)
        return rows

    def rows(self, index: np.ndarray) -> list[dict[str, Any]]:
        """The rows at ``index`` as JSON-able dicts (NaN as None)."""
        cols: dict[str, list[Any]] = {}
        for c in self.columns:
            arr = self.data[c][index]
            values = arr.tolist()
            if arr.dtype.kind == "f":
                values = [None if isinstance(v, float) and math.isnan(v) else v for v in values]
            cols[c] = values
        return [{c: cols[c][i] for c in self.columns} for i in range(len(index))]


class KernelViews:
    """The kernel views of ready bundles, loaded once per bundle hash (most recent kept)."""

    def __init__(self, storage: Storage, cache_dir: Path, *, columns: tuple[str, ...],
                 build: Callable[[KernelTable], tuple[np.ndarray, TraceTotals]],
                 max_views: int = MAX_VIEWS) -> None:
        self.storage = storage
        self.cache_dir = cache_dir
        self.wanted = columns
        self.build = build
        """``table -> (family names, chart totals)``."""
        self.max_views = max_views
        self._views: OrderedDict[str, KernelView] = OrderedDict()
        self._loading: dict[str, asyncio.Task[KernelView]] = {}

    async def get(self, record: TraceRecord) -> KernelView:
        """The kernel view of a ready trace's bundle (fetched and loaded on first use)."""
        key = record.bundle_hash or ""
        view = self._views.get(key)
        if view is not None:
            self._views.move_to_end(key)
            return view
        task = self._loading.get(key)
        if task is None:
            task = asyncio.create_task(self._load(record))
            self._loading[key] = task
            task.add_done_callback(lambda _t: self._loading.pop(key, None))
        view = await asyncio.shield(task)
        self._views[key] = view
        while len(self._views) > self.max_views:
            self._views.popitem(last=False)
        return view

    async def _load(self, record: TraceRecord) -> KernelView:
        directory = await fetch_bundle(self.storage, record, self.cache_dir)
        return await asyncio.to_thread(self._view_of, directory)

    def _view_of(self, directory: Path) -> KernelView:
        table = bundle_kernels(directory)
        columns = [c for c in self.wanted if table.has(c)]
        family, summary = self.build(table)
        return KernelView(table, columns, family, summary)
