"""cascade.platform.storage without a server: its constructor validates the endpoint and the part
size (against a real SeaweedFS server: tests/integration/test_storage.py)."""

from __future__ import annotations

import pytest

from cascade.errors import ValidationError
from cascade.platform.storage import Storage


def test_constructor_validates() -> None:
    with pytest.raises(ValidationError, match="http"):
        Storage(endpoint="127.0.0.1:8333", access_key="a", secret_key="b", bucket="c")
    with pytest.raises(ValidationError, match="part size"):
        Storage(endpoint="http://x", access_key="a", secret_key="b", bucket="c", part_size=1024)
