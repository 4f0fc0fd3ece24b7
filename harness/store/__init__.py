"""Append-only, atomically written store of engine samples (see :mod:`speceq.store.chunks`)."""

from speceq.store.atomic import atomic_write, write_json_atomic
from speceq.store.chunks import (
    CONTROL_ROLE,
    ROLES,
    STORE_FORMAT,
    ChunkKey,
    SampleStore,
    canonical_json,
    diff_identities,
)
from speceq.store.frame import FRAME_COLUMNS, load_samples_frame

__all__ = [
    "CONTROL_ROLE",
    "ROLES",
    "STORE_FORMAT",
    "FRAME_COLUMNS",
    "ChunkKey",
    "SampleStore",
    "atomic_write",
    "canonical_json",
    "diff_identities",
    "load_samples_frame",
    "write_json_atomic",
]
