"""scipy.special on first use, not at import.

scipy.special (and the numpy.f2py it pulls in) is a tenth of a second or more to import,
paid by every web, worker and ``manage.py`` process that imports the engine, though
most never draw a quantile. ``special.ndtri`` here imports it the first time a function
is asked for; after that the function is a plain attribute of this object.
"""

from __future__ import annotations

from typing import Any


class _LazySpecial:
    def __getattr__(self, name: str) -> Any:
        import scipy.special

        value = getattr(scipy.special, name)
        setattr(self, name, value)  # the next lookup finds it without __getattr__
        return value


special: Any = _LazySpecial()
