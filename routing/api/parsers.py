"""The API's JSON parser: DRF's, with the bounds of routing.core.jsonsafe (nesting depth,
finite numbers within a double's range, no key twice, no NUL or lone surrogate; the field
named where known), so a hostile body is a 400 and never reaches a recursive parser
or the database."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from routing.core import jsonsafe
from routing.core.formats import echo


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
            raise ParseError(f"JSON parse error - unknown charset {echo(encoding, 40)}.") from None
        except jsonsafe.UnsafeJSON as exc:
            if exc.path is None:
                raise ParseError(f"JSON parse error - {exc}") from None
            # (Imported here: httpedge.problems imports DRF, whose settings import this.)
            from httpedge.problems import Problem

            raise Problem(  # the field named, as `parameter` (OpenAI's envelope: `param`)
                status_code=400,
                slug="malformed-request",
                title="Malformed request",
                detail=f"JSON parse error - {exc}",
                parameter=exc.path,
            ) from None
        except ValueError as exc:  # jsonsafe.UnsafeJSON, json.JSONDecodeError
            raise ParseError(f"JSON parse error - {exc}") from None
