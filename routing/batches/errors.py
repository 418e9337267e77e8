"""Refusals of the batch services. They carry no HTTP status: the API maps each `code`
(the problem slug) to one in its single exception -> problem table."""

from __future__ import annotations


class BatchError(Exception):
    """A refusal the client can act on; `param` names the offending field, `code` is the
    problem slug."""

    def __init__(self, message: str, *, param: str | None = None, code: str = "invalid-batch"):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


class BatchNotCancellable(BatchError):
    pass


def error_entry(
    code: str, message: str, line: int | None = None, param: str | None = None, custom_id=None
) -> dict:
    """One entry of a batch's `errors` list or of its error file (codes are snake_case)."""
    e = {"code": code, "message": message, "line": line, "param": param}
    if custom_id is not None:
        e["custom_id"] = custom_id
    return e
