"""The API's JSON parser: DRF's, with the bounds of routing.core.jsonsafe (nesting depth,
finite numbers, no NUL or lone surrogate), so a hostile body is a 400 and never reaches a recursive parser
or the database."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from routing.core import jsonsafe


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        if stream is None:
            return None
        encoding = (parser_context or {}).get("encoding") or "utf-8"
        raw = stream.read()
        try:
            return jsonsafe.loads(raw.decode(encoding))
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding}: {exc}") from None
        except LookupError:
            raise ParseError(f"JSON parse error - unknown charset {encoding!r}.") from None
        except ValueError as exc:  # jsonsafe.UnsafeJSON, json.JSONDecodeError
            raise ParseError(f"JSON parse error - {exc}") from None
