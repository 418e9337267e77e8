"""Instances of a JSON Schema from a seed, by a maintained generator (jsf), each
validated with `jsonschema` before it is returned: what is sent is always valid.

jsf draws from the `random` module and Faker's shared generator: both are seeded under
a lock for the draw, and the module's state put back afterwards, so the same seed gives
the same instance and the rest of the process's randomness is left as it was."""

from __future__ import annotations

import random
import threading
from typing import Any

from jsonschema import FormatChecker, validators

from routing.agents.schemas import SchemaError

# Tries with successive seeds before the schema is declared one we cannot satisfy
# (jsf's draw is random: a `pattern` with a tight length, `uniqueItems` on a small enum).
TRIES = 20
_lock = threading.Lock()


def validator(schema: dict):
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    return cls(schema, format_checker=FormatChecker())


def instance(schema: dict, seed: int, where: str) -> Any:
    """A value valid under `schema`, the same for the same seed. SchemaError (naming
    `where`) when none was found in TRIES draws."""
    # jsf (and Faker, smart_open, boto3 under it) is imported on first use, not with the
    # module: it is a third of a second that every web, worker and manage.py process
    # would otherwise pay at start, and most never generate an instance.
    from faker import Faker
    from jsf import JSF

    check = validator(schema)
    last = ""
    for attempt in range(TRIES):
        with _lock:
            state = random.getstate()
            try:
                random.seed(seed + attempt)
                Faker.seed(seed + attempt)
                value = JSF(schema, allow_none_optionals=0.0, max_recursive_depth=4).generate()
            except Exception as exc:  # jsf's own failures: a schema it cannot walk
                last = f"{type(exc).__name__}: {exc}"
                continue
            finally:
                random.setstate(state)
        errors = sorted(check.iter_errors(value), key=lambda e: list(e.path))
        if not errors:
            return value
        last = errors[0].message
    raise SchemaError(
        f"{where}: the simulated model found no instance of this schema in {TRIES} draws "
        f"(is it satisfiable? last: {last[:200]})",
        "schema",
        where,
    )
