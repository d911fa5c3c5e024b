"""How many presigned URLs an upload takes, on both sides: the api's count per file
(:func:`services.api.uploads.upload_urls`) and the client's bound and batches
(:func:`programs.client.upload_batches`), which never ask for more than the api takes."""

from __future__ import annotations

import pytest

from programs.client import upload_batches, upload_url_bound
from services.api.uploads import MAX_UPLOAD_URLS, PART_URLS_PER_FILE, part_size, upload_urls

MiB = 1024 * 1024
GiB = 1024 * MiB


@pytest.mark.parametrize("threshold", [5 * MiB, 16 * MiB, 64 * MiB, 1024 * MiB])
@pytest.mark.parametrize("size", [0, 1, 5 * MiB - 1, 5 * MiB, 6 * MiB, 64 * MiB, 16 * GiB, 16 * GiB + 1, 64 * GiB])
def test_the_clients_bound_holds_for_any_threshold(size: int, threshold: int) -> None:
    urls = upload_urls(size, threshold)
    assert 1 <= urls <= min(PART_URLS_PER_FILE, upload_url_bound(size))
    if size >= threshold:
        assert part_size(size, threshold) * urls >= size and part_size(size, threshold) % MiB == 0


def test_a_64_gib_file_takes_1024_parts_of_64_mib() -> None:
    assert part_size(64 * GiB, 64 * MiB) == 64 * MiB and upload_urls(64 * GiB, 64 * MiB) == 1024


def test_batches_keep_the_order_and_stay_under_the_bound() -> None:
    files = [(f"kernel-{i}.traceg", 64 * GiB if i % 7 == 0 else 100) for i in range(1, 9000)]
    batches = upload_batches(files)
    assert [f for b in batches for f in b] == files
    assert all(sum(upload_url_bound(s) for _, s in b) <= MAX_UPLOAD_URLS for b in batches)
    assert len(batches) > 1 and upload_batches(files[:10]) == [files[:10]] and upload_batches([]) == [[]]
