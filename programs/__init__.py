"""Programs: the ``cascade`` CLI, benchmarks, the embedded stack and the profiler.

They sit apart from the library (:mod:`cascade`) and the services, and are handed what they run.
"""
