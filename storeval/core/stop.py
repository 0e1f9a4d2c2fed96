"""The process-wide stop request: the engine sets it, hot loops look at it when they fold."""

from __future__ import annotations

import threading

# Set when the engine asks this client to stop; hot loops look at it when they fold.
STOP = threading.Event()


class ClientStopped(Exception):
    """The engine stopped this client (another client failed, a timeout, or Ctrl-C)."""
