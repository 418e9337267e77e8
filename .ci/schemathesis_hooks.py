"""Schemathesis hooks for .ci/schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

The fuzzer authenticates with one admin key (FUZZ_KEY_ID is its id) and may revoke or
rotate keys: DELETE /keys/{key_id} and POST /keys/{key_id}/rotate. Aimed at its own key
(the coverage phase tries small ids such as 1; the stateful phase follows GET /keys to
it), either request ends the key the fuzzer holds, and every later request is a 401:
the rest of the run then passes while testing nothing (on 2026-12-06 CI's stateful
phase covered 1 link of 71, twice in a row, after the stateless phase had revoked the
key). Such a request is sent for id 0 instead, which no key has (a 404 like any unknown
id); revoking and rotating stay fuzzed on every other id, and on the keys the stateful
phase makes with POST /keys. The script also checks after each phase that the key
still works.

Also: `ast.parse` runs one call at a time in this process. Schemathesis' two worker
threads ask Hypothesis for lambdas' descriptions, which parses their source files, and
CPython 3.11 keeps the AST constructor's recursion depth in state shared by all threads:
two parses at once can fail with "SystemError: AST constructor recursion depth mismatch"
(python/cpython#106905; seen once here on 2026-12-06, as a runtime error of
GET /api/v1/batches in the coverage phase). A lock makes the parses take turns.
"""

from __future__ import annotations

import ast
import os
import threading

import schemathesis

_parse, _parse_lock = ast.parse, threading.Lock()


def _parse_one_at_a_time(*args, **kwargs):
    with _parse_lock:
        return _parse(*args, **kwargs)


ast.parse = _parse_one_at_a_time

OWN_KEY_ID = int(os.environ["FUZZ_KEY_ID"])
ENDS_A_KEY = {("DELETE", "/keys/{key_id}"), ("POST", "/keys/{key_id}/rotate")}


def ends_own_key(method: str, path: str, key_id: object) -> bool:
    """Whether this request would revoke or rotate the fuzzer's key: the server reads a
    path id as ASCII digits (routing.api.base.ascii_id), so "01" is key 1 too."""
    if not any(method.upper() == m and path.endswith(p) for m, p in ENDS_A_KEY):
        return False
    value = str(key_id)
    return value.isascii() and value.isdigit() and int(value) == OWN_KEY_ID


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    params = case.path_parameters  # edited in place: schemathesis revalidates the case
    if params and ends_own_key(case.method, case.path, params.get("key_id")):
        params["key_id"] = "0"
