"""Erlang's external term format (term_to_binary, version 131), decoded into Python values as
far as a Ra log entry needs: atoms become str, binaries bytes, tuples tuple, lists list
(an improper tail dropped), maps dict, integers and floats int and float; pids, ports,
references and funs are kept as their raw bytes (opaque). A compressed term or a tag this
decoder does not know raises Unreadable."""
from __future__ import annotations

import struct
from typing import Any, Callable


class Unreadable(Exception):
    """A term (or a file holding terms) this reader cannot read."""


def decode(data: bytes) -> Any:
    """The term term_to_binary wrote into `data`."""
    if not data or data[0] != 131:
        raise Unreadable(f"not an external term: {data[:2]!r}")
    value, _ = _term(data, 1)
    return value


def _term(b: bytes, i: int) -> tuple[Any, int]:
    tag = b[i]
    read = _TAGS.get(tag)
    if read is None:
        raise Unreadable(f"external term tag {tag} at byte {i}")
    return read(b, i + 1)


def _many(b: bytes, i: int, n: int) -> tuple[list, int]:
    out = []
    for _ in range(n):
        v, i = _term(b, i)
        out.append(v)
    return out, i


def _tuple(size: str) -> Callable:
    def read(b: bytes, i: int):
        n = struct.unpack_from(size, b, i)[0]
        items, i = _many(b, i + struct.calcsize(size), n)
        return tuple(items), i
    return read


def _list(b: bytes, i: int):
    n = struct.unpack_from(">I", b, i)[0]
    items, i = _many(b, i + 4, n)
    _, i = _term(b, i)  # the tail: nil, or an improper list's last element
    return items, i


def _map(b: bytes, i: int):
    n = struct.unpack_from(">I", b, i)[0]
    flat, i = _many(b, i + 4, 2 * n)
    return {_key(k): v for k, v in zip(flat[::2], flat[1::2])}, i


def _key(k: Any) -> Any:
    return tuple(_key(x) for x in k) if isinstance(k, (list, tuple)) else k


def _atom(size: str) -> Callable:
    def read(b: bytes, i: int):
        n = struct.unpack_from(size, b, i)[0]
        j = i + struct.calcsize(size)
        return b[j:j + n].decode("utf-8", "replace"), j + n
    return read


def _binary(b: bytes, i: int):
    n = struct.unpack_from(">I", b, i)[0]
    return b[i + 4:i + 4 + n], i + 4 + n


def _string(b: bytes, i: int):
    n = struct.unpack_from(">H", b, i)[0]
    return list(b[i + 2:i + 2 + n]), i + 2 + n


def _big(size: str) -> Callable:
    def read(b: bytes, i: int):
        n = struct.unpack_from(size, b, i)[0]
        j = i + struct.calcsize(size)
        v = int.from_bytes(b[j + 1:j + 1 + n], "little")
        return (-v if b[j] else v), j + 1 + n
    return read


def _opaque(read_rest: Callable[[bytes, int], int]) -> Callable:
    """A pid, port or reference: its bytes, as they are."""
    def read(b: bytes, i: int):
        j = read_rest(b, i)
        return b[i - 1:j], j
    return read


def _after_node(fixed: int) -> Callable[[bytes, int], int]:
    """The end of a term that is a node name (an atom) and `fixed` bytes."""
    return lambda b, i: _term(b, i)[1] + fixed


def _reference(creation: int) -> Callable[[bytes, int], int]:
    """The end of a reference: its id's length in words, its node, creation and id."""
    def end(b: bytes, i: int) -> int:
        n = struct.unpack_from(">H", b, i)[0]
        return _term(b, i + 2)[1] + creation + 4 * n
    return end


def _export(b: bytes, i: int):
    items, i = _many(b, i, 3)  # module, function, arity
    return tuple(items), i


def _bits(b: bytes, i: int):
    n = struct.unpack_from(">I", b, i)[0]
    return b[i + 5:i + 5 + n], i + 5 + n


def _fun(b: bytes, i: int):
    n = struct.unpack_from(">I", b, i)[0]
    return b[i - 1:i + n], i + n


_TAGS: dict[int, Callable] = {
    97: lambda b, i: (b[i], i + 1),  # small integer
    98: lambda b, i: (struct.unpack_from(">i", b, i)[0], i + 4),  # integer
    70: lambda b, i: (struct.unpack_from(">d", b, i)[0], i + 8),  # new float
    100: _atom(">H"), 115: _atom(">B"), 118: _atom(">H"), 119: _atom(">B"),  # atoms
    104: _tuple(">B"), 105: _tuple(">I"),
    106: lambda b, i: ([], i),  # nil
    107: _string, 108: _list, 116: _map, 109: _binary, 77: _bits,
    110: _big(">B"), 111: _big(">I"),
    88: _opaque(_after_node(12)), 103: _opaque(_after_node(9)),  # new pid, pid
    89: _opaque(_after_node(8)), 102: _opaque(_after_node(5)), 120: _opaque(_after_node(12)),  # ports
    90: _opaque(_reference(4)), 114: _opaque(_reference(1)),  # newer, new reference
    112: _fun, 113: _export,
}
