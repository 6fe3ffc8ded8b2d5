"""Which counting filter ``bloom.CountingBloomFilter`` is: the compiled one
(``bloom._counting``, from ``bloom/counting.py`` by ``setup.py``: issue 48,
a SUBSCRIBE's filter update in C) or its pure-Python source, the reference.

The rule is the node's (:func:`netutil.dataplane.choose`), read when the
package is first imported: the Python source when ``BLOOMCAST_NO_EXTENSIONS``
is set or the compiled module is not built; so on the compiled plane a
node loads no Python twin (INFO ``bloomcast_data_plane_python_modules``),
and with the switch set every filter runs the reference.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from netutil.dataplane import ENV

if TYPE_CHECKING:
    from bloom.counting import CountingBloomFilter as CountingBloomFilter


def _counting() -> type[CountingBloomFilter]:
    if not os.environ.get(ENV):
        try:
            return importlib.import_module("bloom._counting").CountingBloomFilter
        except ImportError:
            pass
    return importlib.import_module("bloom.counting").CountingBloomFilter


if not TYPE_CHECKING:
    CountingBloomFilter = _counting()
