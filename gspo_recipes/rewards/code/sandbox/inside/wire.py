"""Plain data across the sandbox boundary: tagged JSON of built-in values, with depth and size caps.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/inside/wire.py.
"""

import collections
import itertools
import json
import sys

MAX_DEPTH = 100
MAX_NODES = 1_000_000
MAX_MESSAGE_BYTES = 8 << 20
_SMALL_INT = 1 << 1000  # beyond this, ints cross as hex text (decimal text is capped at 4300 digits)
# Caps that bound the work decoding (and a test's first look at the result) can cost, in time as well as in size:
MAX_INT_HEX_DIGITS = 1 << 15  # ints up to 131,072 bits
MAX_RANGE_LEN = MAX_NODES  # a test summing range(10**18) would run in C, where no alarm reaches it
# Numbers, and so tuples and frozensets of them, hash the same in every process: a program can send many distinct
# values that share one hash (k * (2**61 - 1) + c, complex(c - 1000003 * i, i), tuples of those), so that a set or
# dict of them, built here or by the test, takes quadratic time. Distinct values sharing a hash are rare in honest data.
# (str and bytes hashes are salted per process: the program cannot aim them.)
MAX_HASH_COLLISIONS = 256
MAX_DECIMAL_CHARS = 4300
# A defaultdict crosses with its factory only when that is one of these (by name): a factory is code, not data.
_FACTORIES = {"int": int, "float": float, "str": str, "list": list, "dict": dict, "set": set, "tuple": tuple,
              "frozenset": frozenset, "bool": bool, "complex": complex, "bytes": bytes}  # fmt: skip
_NUMPY_KINDS = "biufcU"  # bool, integers, floats, complex numbers, text


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
        """`value` (any hashable value whose hash the sender can aim), after counting it against the cap."""
        first = self.hashes.setdefault(hash(value), value)
        if first is not value and _differs(first, value):
            self.collisions += 1
            if self.collisions > MAX_HASH_COLLISIONS:
                raise NotPlainData("too many distinct values sharing a hash")
        return value


def _differs(first, value):
    try:
        return bool(first != value)
    except Exception:  # noqa: BLE001 (a numpy scalar beside a tuple: count it as a collision, the safe side)
        return True


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
    inner = lambda item: _encode(item, handle, budget, depth + 1)  # noqa: E731
    tag = _CONTAINER_TAGS.get(kind)
    if tag in ("d", "C", "O", "T"):
        return [tag, [[inner(k), inner(v)] for k, v in (value if tag == "T" else value.items())]]
    if tag == "S" and sys.getsizeof(value) > _EMPTY_SET_BYTES:  # its table's size too: its order is the table's
        return [tag, [inner(item) for item in value], (sys.getsizeof(value) - _EMPTY_SET_BYTES) // _SET_ENTRY_BYTES]
    if tag is not None:
        return [tag, [inner(item) for item in value]]
    special = _encode_special(value, kind, inner)
    if special is not None:
        return special
    if handle is None:
        raise NotPlainData(f"a {kind.__name__} is not plain data")
    return handle(value, lambda inner: _encode(inner, handle, budget, depth + 1))


_CONTAINER_TAGS = {list: "l", tuple: "t", set: "S", frozenset: "F", dict: "d", collections.Counter: "C",
                   collections.OrderedDict: "O", type({}.keys()): "K", type({}.values()): "V",
                   type({}.items()): "T"}  # fmt: skip


def _loaded(module, name):
    """A class of a module only where that module is loaded (no value can be of it otherwise): the sandbox's start
    does not pay for importing fractions and decimal."""
    return getattr(sys.modules.get(module), name, _loaded)


def _encode_special(value, kind, inner):
    """The standard library's data types that carry more than their items, and numpy's; None for anything else."""
    if kind is collections.defaultdict:
        factory = value.default_factory
        name = getattr(factory, "__name__", None) if factory is not None else None
        if factory is not None and _FACTORIES.get(name) is not factory:
            return None  # a factory of the program's own is code: the object stays in the worker
        return ["D", name, [[inner(k), inner(v)] for k, v in value.items()]]
    if kind is collections.deque:
        return ["Q", value.maxlen, [inner(item) for item in value]]
    if kind is _loaded("fractions", "Fraction"):
        return ["R", inner(value.numerator), inner(value.denominator)]
    if kind is _loaded("decimal", "Decimal"):
        return ["M", str(value)]
    if tuple in kind.__bases__ and len(kind.__bases__) == 1 and type(getattr(kind, "_fields", None)) is tuple:
        return ["N", kind.__name__, list(kind._fields), [inner(item) for item in value]]  # a namedtuple
    if kind.__module__ == "numpy" and hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in _NUMPY_KINDS:
        if kind.__name__ == "ndarray":
            return ["a", value.dtype.str, list(value.shape), [inner(item) for item in value.ravel().tolist()]]
        if hasattr(value, "item") and value.shape == ():
            return ["n", value.dtype.str, inner(value.item())]
    return None


def decode(data, handle=None):
    """Fresh built-in objects from `encode`'s output. `handle(id)` resolves handles when given, else they raise.
    Anything malformed (unhashable set items, a float out of range) raises `NotPlainData`."""
    try:
        return _decode(data, handle, _Budget(), 0)
    except (TypeError, ValueError, OverflowError, ArithmeticError, ImportError) as error:
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
    if tag == "g" and len(rest) == 1 and type(rest[0]) is int and handle is not None:
        return handle(("g", rest[0]))  # an iterator of the program's: its items cross one at a time, as taken
    if tag == "k" and len(rest) == 1 and type(rest[0]) is int and handle is not None:
        return handle(("k", rest[0]))  # a function of the judge's (the test's), called back across the boundary
    if tag == "k" and len(rest) == 3 and type(rest[0]) is int and _signature(rest[1], rest[2]) and handle is not None:
        return handle(("k", *rest))  # the same, with its name and parameters
    if tag == "M" and len(rest) == 1 and type(rest[0]) is str and len(rest[0]) <= MAX_DECIMAL_CHARS:
        import decimal

        return budget.number(decimal.Decimal(rest[0]))
    inner = lambda item: _decode(item, handle, budget, depth + 1)  # noqa: E731
    if tag == "S" and len(rest) == 2 and type(rest[0]) is list and type(rest[1]) is int:
        return _set_in_order([inner(item) for item in rest[0]], rest[1])
    if tag in _SPECIAL_DECODERS:
        return _SPECIAL_DECODERS[tag](rest, inner, budget)
    if len(rest) != 1 or type(rest[0]) is not list:
        raise NotPlainData(f"malformed data tagged {tag!r}")
    items = rest[0]
    if tag in _MAPPINGS:
        return _MAPPINGS[tag](_pair(item, handle, budget, depth + 1) for item in items)
    maker = {"l": list, "t": tuple, "S": set, "F": frozenset, "i": iter, "K": _keys, "V": _values}.get(tag)
    if maker is None:
        raise NotPlainData(f"unknown tag {tag!r}")
    value = maker([inner(item) for item in items])
    return budget.number(value) if tag in ("t", "F") and _hashable(value) else value


_MAPPINGS = {
    "d": dict,
    "C": lambda pairs: collections.Counter(dict(pairs)),
    "O": collections.OrderedDict,
    "T": lambda pairs: dict(pairs).items(),
}


_EMPTY_SET_BYTES = sys.getsizeof(set())  # a set whose table is the small one it holds inside itself (8 entries)
_SET_ENTRY_BYTES = 16  # one entry of a larger table: a key and its hash


def _set_in_order(items, table):
    """A set of `items` that iterates in their order, as the sender's did (see `_placed_in_order`), where one can be
    made; else the plain set of them."""
    plain = set(items)
    if [*plain] == items or table & (table - 1) or not 8 < table <= 1 << 16 or len(plain) != len(items):
        return plain
    for lowest in (False, True):
        made = _placed_in_order(items, table, lowest)
        if made is not None:
            return made
    return plain


def _placed_in_order(items, table, lowest):
    """A set of `items` that iterates in their order, as the sender's did. A set's order is where its items sit in its
    table, so they are placed in a table of the sender's size (`table` entries) on slots in that order: each on the
    slot past the one before among the first its search tries (CPython's probing, `_probe`), the slots its
    search tries before that one held while it is added, by the items placed there (added first) or by placeholders
    added and removed before (a removed entry is passed over, never reused). `lowest`: each on the lowest such slot,
    else on the first its search reaches. Checked at the end: None where it did not come out in that order."""
    plain = None
    size = _EMPTY_SET_BYTES + table * _SET_ENTRY_BYTES
    mask, slot_of, passed_by, last = table - 1, {}, [], -1
    for index, item in enumerate(items):
        tried = list(itertools.islice(_probe(hash(item) & 0xFFFFFFFFFFFFFFFF, mask), 30))
        eligible = [slot for slot in tried if slot > last and slot not in slot_of]
        if not eligible:
            return plain
        last = min(eligible) if lowest else eligible[0]
        slot_of[last] = index
        passed_by.append(set(tried[: tried.index(last)]))
    held = set().union(*passed_by) - slot_of.keys()
    # Each item after the items on the slots its search passes first (Kahn's order).
    waiting = [len({slot_of[slot] for slot in passed if slot in slot_of}) for passed in passed_by]
    unblocks = [[] for _ in items]
    for index, passed in enumerate(passed_by):
        for blocker in {slot_of[slot] for slot in passed if slot in slot_of}:
            unblocks[blocker].append(index)
    order = [index for index, count in enumerate(waiting) if count == 0]
    for index in order:  # grows as it goes
        for later in unblocks[index]:
            waiting[later] -= 1
            if waiting[later] == 0:
                order.append(later)
    if len(order) != len(items):
        return plain
    made = set()
    for number in [*sorted(held), *(slot for slot in range(table) if slot not in slot_of and slot not in held)]:
        if sys.getsizeof(made) >= size and number not in held:
            break
        made.add(number)  # an int hashes as itself: once the table has its size, each sits on its own slot
    if sys.getsizeof(made) != size:
        return plain
    for number in list(made):
        made.discard(number)
    for index in order:
        made.add(items[index])
    return made if sys.getsizeof(made) == size and [*made] == items else plain


def _probe(hashed, mask):
    """The slots CPython's set tries for a hash, in order: runs of 10 neighbours, then a jump perturbed by the hash."""
    index, perturb = hashed & mask, hashed
    for _ in range(mask + 1):
        yield from range(index, index + (9 if index + 9 <= mask else 0) + 1)
        perturb >>= 5
        index = (index * 5 + 1 + perturb) & mask


def _signature(name, parameters):
    """Whether a test's function's name and parameters (`[[name, kind, has a default, the default as data], ...]`)
    are well formed."""

    def parameter(entry):
        return (type(entry) is list and len(entry) == 4 and type(entry[0]) is str and entry[0].isidentifier()
                and type(entry[1]) is int and 0 <= entry[1] <= 4 and type(entry[2]) is bool)  # fmt: skip

    if parameters is None:  # a function Python cannot tell the signature of: its name alone
        return type(name) is str and 0 < len(name) <= 200
    return (type(name) is str and 0 < len(name) <= 200 and type(parameters) is list and len(parameters) <= 64
            and all(parameter(entry) for entry in parameters))  # fmt: skip


def _keys(items):
    return dict.fromkeys(items).keys()


def _values(items):
    return dict(enumerate(items)).values()


def _hashable(value):
    try:
        hash(value)
    except TypeError:  # a tuple holding a list
        return False
    return True


def _decode_defaultdict(rest, inner, budget):
    if len(rest) != 2 or not (rest[0] is None or rest[0] in _FACTORIES) or type(rest[1]) is not list:
        raise NotPlainData("malformed defaultdict")
    pairs = [_pair_of(item, inner) for item in rest[1]]
    return collections.defaultdict(_FACTORIES.get(rest[0]), pairs)


def _decode_deque(rest, inner, budget):
    if len(rest) != 2 or not (rest[0] is None or type(rest[0]) is int) or type(rest[1]) is not list:
        raise NotPlainData("malformed deque")
    return collections.deque([inner(item) for item in rest[1]], rest[0])


def _decode_fraction(rest, inner, budget):
    if len(rest) != 2:
        raise NotPlainData("malformed Fraction")
    numerator, denominator = inner(rest[0]), inner(rest[1])
    if type(numerator) is not int or type(denominator) is not int or denominator <= 0:
        raise NotPlainData("malformed Fraction")
    import fractions

    return budget.number(fractions.Fraction(numerator, denominator))


_NAMEDTUPLES = {}


def _decode_namedtuple(rest, inner, budget):
    if len(rest) != 3 or type(rest[0]) is not str or type(rest[1]) is not list or type(rest[2]) is not list:
        raise NotPlainData("malformed namedtuple")
    name, fields = rest[0], tuple(rest[1])
    if not (name.isidentifier() and len(fields) == len(rest[2]) <= 255 and len(name) <= 100):
        raise NotPlainData("malformed namedtuple")
    if not all(type(field) is str and field.isidentifier() and not field.startswith("_") for field in fields):
        raise NotPlainData("malformed namedtuple")
    key = (name, fields)
    if key not in _NAMEDTUPLES:  # the decoder's own class, made once per name and fields (and only so many)
        if len(_NAMEDTUPLES) >= 1000:
            raise NotPlainData("too many namedtuple types")
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)
    value = _NAMEDTUPLES[key](*[inner(item) for item in rest[2]])
    return budget.number(value) if _hashable(value) else value


def _decode_numpy(rest, inner, budget):
    import numpy  # only where numpy data crossed: the sender had it, and the judge has its own

    array = rest[0] == "a"
    rest = rest[1:]
    if (len(rest) != (3 if array else 2)) or type(rest[0]) is not str or len(rest[0]) > 16:
        raise NotPlainData("malformed numpy value")
    dtype = numpy.dtype(rest[0])
    if dtype.kind not in _NUMPY_KINDS:
        raise NotPlainData("a numpy value of a kind that is not data")
    if not array:
        return budget.number(dtype.type(inner(rest[1])))
    shape, items = rest[1], rest[2]
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape) or type(items) is not list:
        raise NotPlainData("malformed numpy array")
    values = [inner(item) for item in items]
    if len(shape) > 32 or _product(shape) != len(values):
        raise NotPlainData("malformed numpy array")
    return numpy.array(values, dtype=dtype).reshape(shape)


def _product(numbers):
    total = 1
    for n in numbers:
        total *= n
    return total


def _pair_of(item, inner):
    if type(item) is not list or len(item) != 2:
        raise NotPlainData("malformed dict item")
    return inner(item[0]), inner(item[1])


_SPECIAL_DECODERS = {"D": _decode_defaultdict, "Q": _decode_deque, "R": _decode_fraction, "N": _decode_namedtuple,
                     "n": lambda rest, inner, budget: _decode_numpy(["n", *rest], inner, budget),
                     "a": lambda rest, inner, budget: _decode_numpy(["a", *rest], inner, budget)}  # fmt: skip


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
