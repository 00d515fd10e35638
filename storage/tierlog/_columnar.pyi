# Types of the native record walker (storage/columnar/src/columnar.c); see
# tierlog.storage.records.columnar for the typed API over it.

import mmap

_Binary = tuple[bytearray, bytearray, bytearray | None, int]
_Headers = tuple[bytearray, bytearray | None, int, _Binary, _Binary]

class Columns:
    def __init__(self, include_headers: bool = False) -> None: ...
    def __len__(self) -> int: ...
    @property
    def data_bytes(self) -> int: ...
    def add_v2(
        self,
        data: bytes | bytearray | memoryview | mmap.mmap,
        start: int,
        end: int,
        record_count: int,
        base_offset: int,
        base_timestamp: int,
        log_append_time: int | None,
        timestamp_type: int,
        low: int,
        high: int,
    ) -> int: ...
    def add_rows(
        self,
        rows: list[
            tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
        ],
        timestamp_type: int,
        /,
    ) -> int: ...
    def take(
        self,
    ) -> tuple[int, bytearray, bytearray, bytearray, _Binary, _Binary, _Headers | None]: ...
