"""How the admin shows dates and times (FORMAT_MODULE_PATH): ISO-like, in UTC, to the
second, short enough for list columns ("2026-12-03 12:53:04")."""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
TIME_FORMAT = "H:i:s"
