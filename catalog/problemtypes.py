"""The catalog's problem type (its page at /problems/<slug>: httpedge.problemtypes),
beside the view that raises it (catalog/views.py); registered in CatalogConfig.ready."""

from __future__ import annotations

from httpedge.problemtypes import ProblemType as P

PROBLEM_TYPES: dict[str, P] = {
    "model-not-found": P(
        "Unknown model",
        404,
        "No model version, family alias or `auto` matches the name given.",
        "List models with GET /api/v1/models/ and use a slug or family alias from it.",
    ),
}
