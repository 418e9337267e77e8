"""The HTTP edge: what every API surface shares, below `catalog` and `routing` (it
imports neither): RFC 9457 problems and the problem-type pages, strict query parameters,
cursor pagination, the OpenAPI hooks, the input-guard and browser-only middleware, OPTIONS
metadata, the debug page's guard, the client address, the health check, trailing-slash
routes and the error texts' `cut`/`echo`. `deploy/` wires it; domain rules stay out."""
