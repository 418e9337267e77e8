"""Error type raised by the simulation engine."""

from __future__ import annotations


class SimEngineError(ValueError):
    """Invalid input or an impossible request (model does not fit, load >= capacity...).

    Subclasses ``ValueError`` so callers that validate user input can catch either.
    The message always names the offending quantity and its value.
    """
