"""The tier's data of a deleted cluster: kept (``deletionPolicy: Retain``) or deleted.

Deleting goes through the object-store interface the brokers write with
(``tierlog.storage.tier.url.open_store``); every key under the tier URL's root is the
cluster's, and deletes are idempotent, so a deletion interrupted halfway is finished by
the next attempt. An S3 tier is reached with the keys of the cluster's credentials
Secret (written to a private temporary directory, as a mounted Secret looks, for the
store to read), or the operator's own identity when the cluster names none.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tierlog.operator.spec import Tier
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.url import open_store

__all__ = ["delete_tier_data"]

_DELETE_BATCH = 1000


def _delete_all(tier: Tier, credentials_path: Path | None) -> int:
    options = S3Options(
        region=tier.region,
        endpoint_url=tier.endpoint or None,
        path_style=tier.force_path_style,
        credentials_path=credentials_path,
    )
    store = open_store(tier.url, options)
    try:
        keys = [info.key for info in store.list("")]
        for start in range(0, len(keys), _DELETE_BATCH):
            store.delete(keys[start : start + _DELETE_BATCH])
        return len(keys)
    finally:
        store.close()


async def delete_tier_data(tier: Tier, secret: Mapping[str, str] | None = None) -> int:
    """Delete every object of the tier; how many there were. ``secret``: the credentials
    Secret's decoded data, when the cluster names one."""

    def delete() -> int:
        if secret is None or tier.credentials is None:
            return _delete_all(tier, None)
        with tempfile.TemporaryDirectory(prefix="tierlog-s3-") as directory:
            keys = Path(directory)
            (keys / "access_key_id").write_text(secret[tier.credentials.access_key_id_key])
            (keys / "secret_access_key").write_text(secret[tier.credentials.secret_access_key_key])
            return _delete_all(tier, keys)

    return await asyncio.to_thread(delete)
