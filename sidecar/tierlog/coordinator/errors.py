"""The coordinators' refusals of records they cannot read, under storage's error names.

Both are ``INVALID_RECORD`` to a client, but a loader treats them apart: Kafka's skips
a record of an unknown type (left by another version) and fails on an unknown value
version (it could not rebuild the state that record carries).
"""

from __future__ import annotations

from tierlog.storage.errors import InvalidRecordError

__all__ = ["UnknownRecordTypeError", "UnknownRecordVersionError"]


class UnknownRecordTypeError(InvalidRecordError):
    """A key whose record type this coordinator does not know."""


class UnknownRecordVersionError(InvalidRecordError):
    """A value version outside its schema's (Kafka's ``UnknownRecordVersionException``)."""
