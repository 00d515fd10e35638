"""The remote tier: object stores, remote segment metadata, the uploader and the
remote reader that serves offsets below the local log start."""
