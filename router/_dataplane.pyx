# cython: boundscheck=False, wraparound=False
"""The compiled twin of the Python core's hot loop (issue 29). Placeholder:
the build and the switch first."""


def compiled() -> bool:
    return True


def version() -> int:
    return 2
