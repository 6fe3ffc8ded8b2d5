"""What the node logs about one client, in Redis's words (``networking.c``).

- disconnected by ``client-output-buffer-limit`` (notice): Redis's
  ``Client %s scheduled to be closed ASAP for overcoming of output buffer
  limits.``, the client shown as its CLIENT LIST line;
- a protocol error (verbose): Redis's ``Protocol error (%s) from client: %s``;
- closed by ``timeout`` (verbose): Redis's ``Closing idle client``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from router.commands.client_view import info_line

if TYPE_CHECKING:
    from router.context import CommandClient

log = logging.getLogger("bloomcast.client")

#: Redis's LL_VERBOSE (bloomcast/node_log.py maps it to ``-``)
VERBOSE = 15


def output_buffer_disconnect(client: CommandClient) -> None:
    log.info(
        "Client %s scheduled to be closed ASAP for overcoming of output buffer limits.",
        info_line(client),
    )


def protocol_error(client: CommandClient, error: str) -> None:
    if log.isEnabledFor(VERBOSE):
        reason = error.removeprefix("ERR Protocol error: ")
        log.log(VERBOSE, "Protocol error (%s) from client: %s", reason, info_line(client))


def idle_closed(client: CommandClient) -> None:
    log.log(VERBOSE, "Closing idle client")
