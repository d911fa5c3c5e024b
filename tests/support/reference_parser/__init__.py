"""The trace parser as it was before the fast path (commit 3f5e7bc), kept verbatim as a test oracle.

``parse.py``, ``lines.py`` and ``memory.py`` are copies of
``shared/cascade/traces/{parse,lines,memory}.py`` at that commit, with only
their imports of each other redirected here. ``tests/unit/test_traces_reference.py``
checks that the current parser's per-kernel features equal this one's on the
real traces and on generated traces. Do not edit (except imports).
"""
