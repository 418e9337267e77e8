"""Query parameters read strictly: a parameter given twice, or a value the API does not
accept, is a 400 problem naming the parameter, never silently ignored."""

from __future__ import annotations

from httpedge.problems import Problem


def invalid_parameter(name: str, detail: str) -> Problem:
    return Problem(
        status_code=400,
        slug="invalid-parameter",
        title="Invalid query parameter",
        detail=detail,
        parameter=name,
    )


def query_value(request, name: str) -> str | None:
    """The one value of query parameter `name` (None when absent); 400 if repeated."""
    values = request.query_params.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise invalid_parameter(name, f"{name} is given {len(values)} times; give it once.")
    return values[0]


def query_int(request, name: str, *, minimum: int, maximum: int | None = None) -> int | None:
    """A whole number from `minimum` (to `maximum`), or None when absent; 400 otherwise."""
    raw = query_value(request, name)
    if raw is None:
        return None
    bound = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
    # ASCII digits only: int() would also take "+5", " 5", "5_0" and other scripts' digits.
    value = int(raw) if raw.isascii() and raw.isdigit() else None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        raise invalid_parameter(name, f"{name} must be a whole number {bound}.")
    return value
