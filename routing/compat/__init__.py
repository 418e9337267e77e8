"""The OpenAI-compatible surface at /v1/: a thin adapter over the same services as the
native /api/v1/ API (no second copy of any rule), in OpenAI's shapes (Unix timestamps,
`{"error": {...}}` envelopes) so the official `openai` SDK works unchanged."""
