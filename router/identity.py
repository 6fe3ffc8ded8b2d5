"""The one identity a node declares: which Redis it answers as.

Redis 7.0.15 (Debian's ``redis-server``, the oracle of ``tests/differential``):
HELLO's ``version`` and INFO's ``redis_version`` say it, and the node's
replies, error texts and CLIENT LIST fields are that version's. A few
commands of later versions are kept because clients send them (CLIENT
SETINFO, Redis 7.2's; answered as Valkey does, the oracle of those) or they
cost nothing (CLUSTER MYSHARDID, Redis 7.2's). HELLO's ``server`` names the
product, as Valkey's names itself.
"""

from __future__ import annotations

#: HELLO ``version`` and INFO ``redis_version``
REDIS_VERSION = "7.0.15"
#: HELLO ``server``
SERVER_NAME = "bloomcast"
#: INFO ``bloomcast_version``
BLOOMCAST_VERSION = "0.1.0"
