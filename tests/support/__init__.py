"""Shared test support: the real-server session fixtures, stacks, stand-ins, reference code and
the wait helpers. Imported by the tests of every tier; holds no tests itself."""
