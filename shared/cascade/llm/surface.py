"""A measured efficiency surface: log residuals of measured times against the physics of
:mod:`cascade.llm.work`, at measured shapes, interpolated at any shape.

Interpolation is a locally weighted linear fit over the nearest measured shapes in log2 shape
space (weights 1 / (distance^2 + a small floor)), held inside the range of those neighbours'
residuals: exact at a measured shape up to the floor, linear between measured shapes, and
constant beyond the measured range, so physics carries the scaling there. Pure numpy, chunked
so memory stays bounded.
"""

from __future__ import annotations

import numpy as np

_CHUNK = 512
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
    xx = np.einsum("ij,ij->i", x, x)
    eye = np.eye(dims + 1) * RIDGE
    eye[0, 0] = 0.0
    for start in range(0, m, _CHUNK):
        q = query[start:start + _CHUNK].astype(np.float64)
        d2 = np.einsum("ij,ij->i", q, q)[:, None] + xx[None, :] - 2.0 * q @ x.T
        np.maximum(d2, 0.0, out=d2)
        idx = np.argpartition(d2, k - 1, axis=1)[:, :k] if k < len(x) else np.broadcast_to(
            np.arange(len(x)), (len(q), len(x)))
        dk = np.take_along_axis(d2, idx, axis=1)
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
