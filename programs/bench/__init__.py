"""Benchmark commands (`cascade bench NAME`): each prints measured figures.

Every module here defines ``NAME: str``, ``HELP: str``,
``add_arguments(parser)`` and ``run(args) -> int``; modules are discovered.
"""
