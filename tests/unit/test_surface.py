"""The LLM efficiency surface's neighbour search (:func:`cascade.llm.surface.interpolate`): the
k-d tree finds the same neighbours as reading every distance, ties in measured order, on grids
where ties are the rule."""

from __future__ import annotations

import numpy as np
import pytest

from cascade.llm import surface


def _brute(points: np.ndarray, residuals: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The same local fit, each query's neighbours from every distance (stable order)."""
    dims = points.shape[1]
    eye = np.eye(dims + 1) * surface.RIDGE
    eye[0, 0] = 0.0
    out, nearest = [], []
    for q in query:
        d2 = ((points - q) ** 2).sum(axis=1)
        idx = np.lexsort((np.arange(len(points)), d2))[:k]
        w = 1.0 / (d2[idx] + surface.DISTANCE_FLOOR)
        design = np.column_stack([np.ones(k), points[idx] - q])
        normal = (design.T * w) @ design + eye
        beta = np.linalg.solve(normal, (design.T * w) @ residuals[idx])[0]
        out.append(np.clip(beta, residuals[idx].min(), residuals[idx].max()))
        nearest.append(np.sqrt(d2[idx].min()))
    return np.asarray(out), np.asarray(nearest)


@pytest.mark.parametrize("seed", range(6))
def test_the_tree_finds_the_neighbours_every_distance_would(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dims = int(rng.integers(2, 5))
    # log2 shapes on an integer grid, duplicates included: ties at every distance
    points = rng.integers(0, 6, size=(int(rng.integers(20, 400)), dims)).astype(float)
    residuals = rng.normal(0, 0.3, len(points))
    query = np.vstack([points[rng.integers(0, len(points), 30)],
                       rng.integers(-1, 7, size=(40, dims)).astype(float),
                       rng.uniform(-1, 7, size=(30, dims))])
    for k in (1, 5, 12):
        got, near = surface.interpolate(points, residuals, query, neighbours=k)
        want, want_near = _brute(points, residuals, query, min(k, len(points)))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(near, want_near, rtol=1e-12, atol=1e-12)


def test_more_ties_than_the_slack_still_take_the_first_in_measured_order() -> None:
    """Thirty shapes exactly 3 octaves from the query (every integer point at squared distance
    9 in three axes), more than the tree's slack: the twelve first measured are used."""
    import itertools

    ring = [p for p in itertools.product(range(-3, 4), repeat=3) if sum(c * c for c in p) == 9]
    assert len(ring) == 30
    rng = np.random.default_rng(7)
    points = np.vstack([np.asarray(ring, dtype=float)[rng.permutation(30)], [[5.0, 5.0, 5.0]]])
    residuals = rng.normal(0, 1, len(points))
    got, near = surface.interpolate(points, residuals, np.zeros((1, 3)), neighbours=12)
    want, _ = _brute(points, residuals, np.zeros((1, 3)), 12)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert near[0] == 3.0
