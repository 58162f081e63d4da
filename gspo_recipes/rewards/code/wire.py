"""Plain data across the sandbox boundary: tagged JSON of built-in values, with depth and size caps.

What crosses between the judge and the sandboxed worker is never pickle or marshal: only None, bool, int, float,
complex, str, bytes, bytearray, list, tuple, dict, set, frozenset and range, plus opaque handles (`["h", id]`) that
name an object the worker keeps. Decoding builds fresh built-in objects, so nothing the model wrote (an `__eq__`
that is always true, an `int` subclass) reaches a comparison in the judge.

This file is also prepended to the harness source that runs inside the sandbox (see `sandbox.py`): standard library
only, no `from __future__` import.
"""

import json

MAX_DEPTH = 100
MAX_NODES = 1_000_000
MAX_ITERATOR_ITEMS = 100_000  # a generator the worker materialises; an endless one is not data
MAX_MESSAGE_BYTES = 8 << 20
_SMALL_INT = 1 << 1000  # beyond this, ints cross as hex text (decimal text is capped at 4300 digits)
# Caps that bound the work decoding (and a test's first look at the result) can cost, in time as well as in size:
MAX_INT_HEX_DIGITS = 1 << 15  # ints up to 131,072 bits
MAX_RANGE_LEN = MAX_NODES  # a test summing range(10**18) would run in C, where no alarm reaches it
# Ints, floats and complex numbers hash the same in every process: a program can send many distinct values that share
# one hash (k * (2**61 - 1) + c, complex(c - 1000003 * i, i)), so that a set or dict of them, built here or by the
# test, takes quadratic time. Distinct numbers sharing a hash are rare in honest data.
MAX_HASH_COLLISIONS = 256


class NotPlainData(TypeError):
    """A value that cannot cross the boundary as data."""


class _Budget:
    __slots__ = ("collisions", "hashes", "nodes")

    def __init__(self):
        self.nodes = 0
        self.hashes = {}
        self.collisions = 0

    def spend(self, depth):
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            raise NotPlainData("value too large or too deeply nested")

    def number(self, value):
        """`value` (an int, float or complex), after counting it against the hash-collision cap."""
        first = self.hashes.setdefault(hash(value), value)
        if first is not value and first != value:
            self.collisions += 1
            if self.collisions > MAX_HASH_COLLISIONS:
                raise NotPlainData("too many distinct numbers sharing a hash")
        return value


def encode(value, fallback=None):
    """`value` as JSON-able tagged data. An object that is not data is replaced by `fallback(obj)` (which returns
    encoded data, such as a handle `["h", id]`) when given; else it raises `NotPlainData`."""
    return _encode(value, fallback, _Budget(), 0)


def _encode(value, handle, budget, depth):
    budget.spend(depth)
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if -_SMALL_INT < value < _SMALL_INT else ["I", format(value, "x")]
    if kind is float:
        return ["f", value]
    if kind is complex:
        return ["c", value.real, value.imag]
    if kind is bytes or kind is bytearray:
        return ["b" if kind is bytes else "B", value.decode("latin-1")]
    if kind is range:
        return ["r", value.start, value.stop, value.step]
    tag = _CONTAINER_TAGS.get(kind)
    if tag == "d":
        return ["d", [[_encode(k, handle, budget, depth + 1), _encode(v, handle, budget, depth + 1)]
                      for k, v in value.items()]]  # fmt: skip
    if tag is not None:
        return [tag, [_encode(item, handle, budget, depth + 1) for item in value]]
    if handle is None:
        raise NotPlainData(f"a {kind.__name__} is not plain data")
    return handle(value, lambda inner: _encode(inner, handle, budget, depth + 1))


_CONTAINER_TAGS = {list: "l", tuple: "t", set: "S", frozenset: "F", dict: "d"}


def decode(data, handle=None):
    """Fresh built-in objects from `encode`'s output. `handle(id)` resolves handles when given, else they raise.
    Anything malformed (unhashable set items, a float out of range) raises `NotPlainData`."""
    try:
        return _decode(data, handle, _Budget(), 0)
    except (TypeError, ValueError, OverflowError) as error:
        if isinstance(error, NotPlainData):
            raise
        raise NotPlainData(f"malformed data: {type(error).__name__}") from None


def _decode(data, handle, budget, depth):
    budget.spend(depth)
    kind = type(data)
    if data is None or kind is bool or kind is str:
        return data
    if kind is int:
        return budget.number(int(data))
    if kind is not list or not data or type(data[0]) is not str:
        raise NotPlainData(f"malformed data: {kind.__name__}")
    tag, rest = data[0], data[1:]
    if tag == "f" and len(rest) == 1 and type(rest[0]) in (int, float):
        return budget.number(float(rest[0]))
    if tag == "I" and len(rest) == 1 and type(rest[0]) is str and len(rest[0]) <= MAX_INT_HEX_DIGITS:
        return budget.number(_hex_int(rest[0]))
    if tag == "c" and len(rest) == 2 and all(type(x) in (int, float) for x in rest):
        return budget.number(complex(float(rest[0]), float(rest[1])))
    if tag in ("b", "B") and len(rest) == 1 and type(rest[0]) is str:
        return (bytes if tag == "b" else bytearray)(rest[0].encode("latin-1"))
    if tag == "r" and len(rest) == 3 and all(type(x) is int for x in rest):
        return _capped_range(*rest)
    if tag == "h" and len(rest) == 1 and type(rest[0]) is int and handle is not None:
        return handle(rest[0])
    if len(rest) != 1 or type(rest[0]) is not list:
        raise NotPlainData(f"malformed data tagged {tag!r}")
    items = rest[0]
    if tag == "d":
        pairs = [_pair(item, handle, budget, depth + 1) for item in items]
        return dict(pairs)
    maker = {"l": list, "t": tuple, "S": set, "F": frozenset, "i": iter}.get(tag)
    if maker is None:
        raise NotPlainData(f"unknown tag {tag!r}")
    return maker([_decode(item, handle, budget, depth + 1) for item in items])


def _hex_int(text):
    try:
        return int(text, 16)
    except ValueError:
        raise NotPlainData("malformed int") from None


def _capped_range(start, stop, step):
    try:
        value = range(start, stop, step)
        if len(value) <= MAX_RANGE_LEN:
            return value
    except (ValueError, OverflowError):  # a zero step; a length beyond sys.maxsize
        pass
    raise NotPlainData("range too long or malformed")


def _pair(item, handle, budget, depth):
    if type(item) is not list or len(item) != 2:
        raise NotPlainData("malformed dict item")
    return _decode(item[0], handle, budget, depth), _decode(item[1], handle, budget, depth)


def dumps(message) -> bytes:
    """One message as a line of JSON (NaN and infinities allowed: they are floats like any other)."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def loads(line: bytes):
    if len(line) > MAX_MESSAGE_BYTES:
        raise NotPlainData("message too large")
    try:
        return json.loads(line)
    except (RecursionError, MemoryError):  # deeply nested JSON: the C parser recurses
        raise NotPlainData("message too deeply nested") from None
