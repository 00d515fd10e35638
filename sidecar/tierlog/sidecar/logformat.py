"""The sidecar's log lines: plain text for people, one JSON object a line for collectors.

``--log-format json`` writes each record as a JSON object with ``time`` (RFC 3339,
UTC, milliseconds), ``level``, ``logger``, ``thread``, ``message`` and, when there is
one, ``exception`` (the formatted traceback), so Loki, Elasticsearch or Cloud
Logging index the fields without a parsing rule.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

__all__ = ["LOG_FORMATS", "JsonFormatter", "configure_logging"]

LOG_FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


# The Kubernetes client's HTTP library logs every request at INFO: with the partition
# state in the API server that is several lines a second, so they speak from WARNING.
_CHATTY = ("httpx", "httpx2")


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    for chatty in _CHATTY:
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.root.level))
