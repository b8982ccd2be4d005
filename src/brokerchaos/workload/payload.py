"""Message payloads carry their identity: `<producer>:<value>[:<padding>]`."""
from __future__ import annotations

from typing import Optional


def encode(producer: str, value: int, size: int = 0) -> bytes:
    body = f"{producer}:{value}".encode()
    if size > len(body) + 1:
        body += b":" + b"x" * (size - len(body) - 1)
    return body


def decode(payload: bytes) -> tuple[Optional[str], Optional[int]]:
    """(producer, value), or (None, None) for a payload that is not ours (a stowaway)."""
    parts = payload.split(b":", 2)
    if len(parts) < 2:
        return None, None
    try:
        return parts[0].decode(), int(parts[1])
    except (UnicodeDecodeError, ValueError):
        return None, None
