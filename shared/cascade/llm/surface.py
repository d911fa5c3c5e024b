"""A measured efficiency surface: log residuals of measured times against the physics of
:mod:`cascade.llm.work`, at measured shapes, interpolated at any shape.

Interpolation is a locally weighted linear fit over the nearest measured shapes in log2 shape
space (weights 1 / (distance^2 + a small floor)), held inside the range of those neighbours'
residuals: exact at a measured shape up to the floor, linear between measured shapes, and
constant beyond the measured range, so physics carries the scaling there. The neighbours come
from a k-d tree (a surface holds ~15,000 shapes and a validation asks ~4,000 at once: the whole
distance matrix took 2 s a call), equally distant ones in the order of the measured shapes, so an
answer never depends on how a search breaks ties; chunked so memory stays bounded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scipy.spatial import cKDTree

_CHUNK = 512
#: Candidates the tree returns beyond the ``neighbours`` wanted, so that shapes tied at the last
#: place are all seen and the first in measured order taken (more ties than this: the row's whole
#: distance vector decides).
_TIE_SLACK = 8
#: Squared log2 distance added to every neighbour's: how far a measured shape's own residual
#: is trusted over its neighbours' trend (a tenth of an octave in every axis, about).
DISTANCE_FLOOR = 1e-3
#: Ridge on the local slopes (keeps a fit over nearly collinear neighbours tame).
RIDGE = 1e-3


def interpolate(points: np.ndarray, residuals: np.ndarray, query: np.ndarray, *, neighbours: int = 12
                ) -> tuple[np.ndarray, np.ndarray]:
    """(residual, distance to the nearest measured shape) at each query row.

    ``points`` [N, D] and ``query`` [M, D] are log2 shape coordinates; ``residuals`` [N].
    """
    m = len(query)
    out = np.zeros(m)
    nearest = np.full(m, np.inf)
    if m == 0 or len(points) == 0:
        return out, nearest
    x = points.astype(np.float64)
    r = residuals.astype(np.float64)
    k = min(neighbours, len(x))
    dims = x.shape[1]
    eye = np.eye(dims + 1) * RIDGE
    eye[0, 0] = 0.0
    tree = _tree(x) if k < len(x) else None
    for start in range(0, m, _CHUNK):
        q = query[start:start + _CHUNK].astype(np.float64)
        if tree is None:
            idx = np.broadcast_to(np.arange(len(x)), (len(q), len(x)))
            dk = ((x[None, :, :] - q[:, None, :]) ** 2).sum(axis=2)
        else:
            idx, dk = _nearest(tree, x, q, k)
        w = 1.0 / (dk + DISTANCE_FLOOR)
        rk = r[idx]
        design = np.concatenate([np.ones((len(q), k, 1)), x[idx] - q[:, None, :]], axis=2)
        weighted = design.transpose(0, 2, 1) * w[:, None, :]
        normal = weighted @ design + eye[None]
        try:
            beta = np.linalg.solve(normal, (weighted @ rk[..., None]))[:, 0, 0]
        except np.linalg.LinAlgError:  # a degenerate neighbourhood: the weighted mean
            beta = (w * rk).sum(axis=1) / w.sum(axis=1)
        out[start:start + len(q)] = np.clip(beta, rk.min(axis=1), rk.max(axis=1))
        nearest[start:start + len(q)] = np.sqrt(dk.min(axis=1))
    return out, nearest


def _tree(x: np.ndarray) -> cKDTree:
    """A k-d tree over ``x`` (scipy imported here, when a surface is first asked: half a second
    that every process importing the engine would otherwise pay at start)."""
    from scipy.spatial import cKDTree

    return cKDTree(x)


def _nearest(tree: cKDTree, x: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` measured shapes nearest each query row (indices, squared distances), ties in
    measured order."""
    wide = min(len(x), k + _TIE_SLACK)
    _, cand = tree.query(q, k=wide)
    cand = np.asarray(cand, dtype=np.int64).reshape(len(q), wide)
    d2 = ((x[cand] - q[:, None, :]) ** 2).sum(axis=2)
    order = np.lexsort((cand, d2), axis=-1)
    cand = np.take_along_axis(cand, order, axis=1)
    d2 = np.take_along_axis(d2, order, axis=1)
    spill = np.flatnonzero(d2[:, k - 1] >= d2[:, wide - 1]) if wide < len(x) else np.empty(0, dtype=np.int64)
    if len(spill):
        # the tie at the k-th place runs past the candidates: every shape as near as the k-th
        # decides (a ball just wider than it holds them all, at least ``wide`` of them), in
        # (distance, measured order)
        bound = d2[spill, k - 1]
        balls = tree.query_ball_point(q[spill], np.sqrt(bound) * (1 + 1e-9) + 1e-12)
        for j, row in enumerate(spill.tolist()):
            ids = np.asarray(balls[j], dtype=np.int64)
            full = ((x[ids] - q[row]) ** 2).sum(axis=1)
            ids, full = ids[full <= bound[j]], full[full <= bound[j]]
            order = np.lexsort((ids, full))[:wide]
            cand[row], d2[row] = ids[order], full[order]
    return cand[:, :k], d2[:, :k]
