"""The pipeline's errors: bad options and lost data, as typed storage errors.

Both derive from the storage hierarchy so a job's caller catches one root
(``TierlogError``); the Kafka names are the ones Spark's Kafka source users know.
"""

from __future__ import annotations

from tierlog.storage.errors import InvalidConfigError, OffsetOutOfRangeError

__all__ = ["DataLossError", "InvalidOptionError", "JvmSourceError"]


class InvalidOptionError(InvalidConfigError):
    """A data source option is missing, malformed or contradicts another one."""


class DataLossError(OffsetOutOfRangeError):
    """Offsets the query asked for are no longer stored (``failOnDataLoss=true``)."""


class JvmSourceError(InvalidConfigError):
    """The JVM side of ``format("tierlog")`` cannot be built or is not on Spark's classpath."""
