"""History format v1: the only contract between the workload/nemesis and the analysis.

docs/history-format.md is the prose version of this module; keep the two in step.
"""
import pyarrow as pa

FORMAT_VERSION = 1

SCHEMA = pa.schema(
    [
        ("run", pa.string()),
        ("client", pa.string()),
        ("seq", pa.int64()),
        ("t_ns", pa.int64()),
        ("type", pa.string()),
        ("producer", pa.string()),
        ("value", pa.int64()),
        ("offset", pa.string()),
        ("node", pa.string()),
        ("detail", pa.string()),
    ]
)

COLUMNS = SCHEMA.names

# send/ack/nack/unknown/recv/fault/heal are the core of v1. read_end is an optional
# marker a reader writes when it stops (detail "complete" or "incomplete: why"), so a
# read that could not finish is never mistaken for data loss. ready (optional, nemesis)
# marks the cluster whole again after a heal: the end of the seeds' "downtime".
MESSAGE_TYPES = ("send", "ack", "nack", "unknown", "recv")
NEMESIS_TYPES = ("fault", "heal")
EVENT_TYPES = MESSAGE_TYPES + NEMESIS_TYPES + ("read_end", "ready")

NEMESIS_CLIENT = "nemesis"
