"""The wire records live in :mod:`storage.records`, shared with the HTTP edge (which rejects with
422 exactly what the worker would dead-letter); re-exported here for the worker's modules.
"""

from __future__ import annotations

from storage.records import (
    MAX_FIELD_CHARS,
    MAX_METADATA_BYTES,
    MAX_NAME_BYTES,
    VECTOR_NORM_RANGE,
    VERSION,
    AccessEventV1,
    AccessRecord,
    ConsolidationRequest,
    ConsolidationRequestV1,
    DecisionRecord,
    DecisionV1,
    Limits,
    MemoryWriteV1,
    RecordError,
    WriteRecord,
    decode_access,
    decode_consolidation,
    decode_decision,
    decode_memory_event,
    decode_write,
    encode_access,
    encode_write,
)

__all__ = [
    "MAX_FIELD_CHARS",
    "MAX_METADATA_BYTES",
    "MAX_NAME_BYTES",
    "VECTOR_NORM_RANGE",
    "VERSION",
    "AccessEventV1",
    "AccessRecord",
    "ConsolidationRequest",
    "ConsolidationRequestV1",
    "DecisionRecord",
    "DecisionV1",
    "Limits",
    "MemoryWriteV1",
    "RecordError",
    "WriteRecord",
    "decode_access",
    "decode_consolidation",
    "decode_decision",
    "decode_memory_event",
    "decode_write",
    "encode_access",
    "encode_write",
]
