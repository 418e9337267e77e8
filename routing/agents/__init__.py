"""What the simulated model answers an agent framework: tool calls whose arguments are
valid under each function's `parameters` schema, and structured outputs (JSON objects,
instances of a JSON Schema), generated from a seed, validated before they are sent.

Pure: no Django, nothing of the service but routing.core (the token rule, the filler
text). routing.compat reads the request into `AnswerRequest` and sends `Answer`."""
