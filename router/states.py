"""The states of a client connection (:class:`State`), every change allowed
between them (:data:`TRANSITIONS`, applied by
:meth:`router.connection.Connection._to`), CLIENT REPLY's own small state
(:class:`ReplyMode`) and what a connection asks of the event loop
(:class:`Action`)::

    NORMAL <-> SUBSCRIBED           RESP2 with a subscription: only (P|S)(UN)SUBSCRIBE,
                                    PING, QUIT, RESET run (Redis's pub/sub context)
    NORMAL -> IN_MULTI              MULTI: commands are queued (+QUEUED)
    IN_MULTI -> EXECUTING -> rest   EXEC runs the queue (replies never wait)
    IN_MULTI -> rest                DISCARD, RESET, an aborted EXEC
    rest -> BLOCKED -> rest         a reply awaited (subscribe visibility, CLIENT
                                    PAUSE): input stays buffered; messages wait
                                    behind an awaited reply (counted against the
                                    output limits), flow past a postponed command
    BLOCKED -> EXECUTING -> BLOCKED an EXEC that CLIENT PAUSE postponed runs when
                                    the pause ends; its reply is the one awaited
    open -> CLOSING                 QUIT, a protocol error, CLIENT KILL of itself:
                                    what is queued is written, then closed
    any -> CLOSED                   gone, disconnected (output limit, timeout) or killed

"rest" is NORMAL, SUBSCRIBED or IN_MULTI, as the connection's facts say
(its MULTI queue, protocol and subscriptions:
:meth:`router.connection.Connection._rest`).
"""

from __future__ import annotations

import enum


class State(enum.IntEnum):
    """Where a connection is (module doc). An ``IntEnum``: the compiled
    core (issue 29) keeps the same numbers."""

    NORMAL = 0
    SUBSCRIBED = 1
    IN_MULTI = 2
    EXECUTING = 3
    BLOCKED = 4
    CLOSING = 5
    CLOSED = 6


class ReplyMode(enum.IntEnum):
    """CLIENT REPLY: ON; OFF (no reply until ON or RESET); SKIP (the next
    command's reply only). Pushes (confirmations, messages) always go out."""

    ON = 0
    OFF = 1
    SKIP = 2


class Action(enum.IntEnum):
    """What the request loop (:func:`router.dispatch.process`) asks of the event loop."""

    DONE = 0  # nothing: read on
    SLICE = 1  # stop reading; ``dispatch.resume()`` on the next loop iteration
    BLOCK = 2  # stop reading until ``Connection.blocked`` is done, then ``dispatch.unblock()``


# module-level names: the hot path compares states by identity
NORMAL, SUBSCRIBED, IN_MULTI, EXECUTING = (
    State.NORMAL,
    State.SUBSCRIBED,
    State.IN_MULTI,
    State.EXECUTING,
)
BLOCKED, CLOSING, CLOSED = State.BLOCKED, State.CLOSING, State.CLOSED
RESTING = frozenset({NORMAL, SUBSCRIBED, IN_MULTI})
ENDS = {CLOSING, CLOSED}
#: every state change allowed (:meth:`router.connection.Connection._to`)
TRANSITIONS: dict[State, frozenset[State]] = {
    NORMAL: frozenset({SUBSCRIBED, IN_MULTI, BLOCKED, *ENDS}),
    SUBSCRIBED: frozenset({NORMAL, BLOCKED, *ENDS}),
    IN_MULTI: frozenset({NORMAL, SUBSCRIBED, EXECUTING, BLOCKED, *ENDS}),
    EXECUTING: frozenset({NORMAL, SUBSCRIBED, BLOCKED, *ENDS}),
    BLOCKED: frozenset({NORMAL, SUBSCRIBED, IN_MULTI, EXECUTING, *ENDS}),
    CLOSING: frozenset({CLOSED}),
    CLOSED: frozenset(),
}
DONE, SLICE, BLOCK = Action.DONE, Action.SLICE, Action.BLOCK
