"""The rate-limited log's old module name (:mod:`netutil.rate_limited_log`).

Kept only while ``cluster_bus/mesh.py`` still imports ``Refusals`` from here
(issue 50: that file was being changed elsewhere when the log was renamed);
delete this module once its import reads ``netutil.rate_limited_log``.
"""

from __future__ import annotations

from netutil.rate_limited_log import RateLimitedLog as Refusals

__all__ = ["Refusals"]
