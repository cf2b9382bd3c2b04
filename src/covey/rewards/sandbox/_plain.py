"""Plain data across the trust boundary (stdlib only; shipped into the sandbox in front of the
harness and the candidate server, never imported by covey itself).

Only these cross: None, bool, int, float, complex, str, bytes, and list / tuple / dict / set /
frozenset of them; iterators and generators travel as the list they yield (rebuilt as an
iterator). Everything is tagged JSON, so decoding never runs code: a value the candidate sends is
rebuilt from scratch by the trusted side, with the trusted side's own types and `==`.

`encode` raises `Suspect` for objects that look like a forged result (a subclass of a plain type,
or a class with its own `__eq__`): the verdict counts those as failed and flags them. Other objects
(e.g. the solution's own `Node` class) raise `Unsupported`, or, given `ref`, travel as an opaque
handle ``["o", id, type name]`` that the other side can only pass back or ask about (`decode`'s `obj`).
"""

import builtins
import collections
import itertools
import json
import os
import types

MAX_ITEMS = 1_000_000
MAX_DEPTH = 200
MAX_INT_HEX = 1 << 20  # hex digits of an int (about 1.26 million decimal digits)


class Unsupported(Exception):
    """A value that is not plain data (e.g. an instance of the solution's own class)."""


class Suspect(Unsupported):
    """A value that imitates plain data or overrides equality: a likely reward hack."""


_ITERATORS = (types.GeneratorType, map, filter, zip, enumerate, reversed, itertools.chain, type(iter([])),
              type(iter(())), type(iter("")), type({}.keys()), type({}.values()), type({}.items()))


_DICTS = (collections.Counter, collections.defaultdict, collections.OrderedDict)
_TYPES = ("int", "float", "complex", "str", "bytes", "bool", "list", "tuple", "dict", "set", "frozenset", "object", "type")
_CALLABLES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.BuiltinMethodType, type)
OPAQUE = ()  # types always sent by handle; the harness adds its remote objects (which refuse == and bool)


def encode(x, depth=0, ref=None, fn=None):
    """Tagged JSON of `x`. `ref(x)`: a handle for an object that stays on this side (or None);
    `fn(x)`: a key for a callable the other side may call back (the test's lambda), or None."""
    if depth > MAX_DEPTH:
        raise Unsupported("data nested too deeply")
    t = type(x)
    if x is None:
        return ["n"]
    if t is bool:
        return ["b", x]
    if t is int:  # hex: no digit limit (Python >= 3.11 caps decimal conversion), linear both ways
        return ["i", format(x, "x")]
    if t is float:
        return ["f", repr(x)]
    if t is complex:
        return ["c", repr(x.real), repr(x.imag)]
    if t is str:
        return ["s", x]
    if t is bytes:
        return ["y", x.decode("latin-1")]
    if t in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "t", set: "S", frozenset: "F"}[t]
        return [tag, [encode(v, depth + 1, ref, fn) for v in _bounded(x)]]
    if t is dict or t in _DICTS:  # Counter, defaultdict, OrderedDict compare like their items
        return ["d", [[encode(k, depth + 1, ref, fn), encode(v, depth + 1, ref, fn)] for k, v in _bounded(x.items())]]
    if t is range:
        return ["r", str(x.start), str(x.stop), str(x.step)]
    if isinstance(x, _ITERATORS) and t in _ITERATORS:
        return ["it", [encode(v, depth + 1, ref, fn) for v in _bounded(x)]]
    if t is type and getattr(builtins, getattr(x, "__name__", ""), None) is x and x.__name__ in _TYPES:
        return ["T", x.__name__]  # int, str, ... passed as arguments (e.g. "drop every int")
    name = getattr(t, "__qualname__", "object")
    key = fn(x) if fn is not None and callable(x) and t not in OPAQUE else None
    if key is not None:
        return ["cb", key, str(name)]
    handle = ref(x) if ref is not None and (isinstance(x, _CALLABLES) or t in OPAQUE) else None
    if handle is not None:
        return ["o", handle, str(name)]
    if isinstance(x, (bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict)):
        raise Suspect(f"a {name} object, a subclass of a plain type")
    if getattr(t, "__eq__", object.__eq__) is not object.__eq__ or getattr(t, "__ne__", object.__ne__) is not object.__ne__:
        raise Suspect(f"a {name} object that defines its own __eq__")
    handle = ref(x) if ref is not None else None
    if handle is not None:
        return ["o", handle, str(name)]
    raise Unsupported(f"a {name} object (only plain data can be checked: numbers, strings, bytes, lists, tuples, dicts, sets)")


def _bounded(items):
    out = []
    for v in items:
        out.append(v)
        if len(out) > MAX_ITEMS:
            raise Unsupported(f"more than {MAX_ITEMS} items")
    return out


def decode(e, depth=0, obj=None, fn=None):
    """Rebuild an encoded value; anything malformed raises ValueError (never runs code).
    `obj(id, type name)` turns an opaque handle into an object of the caller's choosing, and
    `fn(key)` a callable of the other side into a function that calls it back."""
    if depth > MAX_DEPTH or not isinstance(e, list) or not e or not isinstance(e[0], str):
        raise ValueError("malformed value")
    tag, args = e[0], e[1:]
    if tag == "n" and not args:
        return None
    if tag == "b" and len(args) == 1 and type(args[0]) is bool:
        return args[0]
    if tag == "i" and len(args) == 1 and type(args[0]) is str and len(args[0]) <= MAX_INT_HEX:
        return int(args[0], 16)
    if tag == "f" and len(args) == 1 and type(args[0]) is str and len(args[0]) < 64:
        return float(args[0])
    if tag == "c" and len(args) == 2 and all(type(a) is str and len(a) < 64 for a in args):
        return complex(float(args[0]), float(args[1]))
    if tag == "s" and len(args) == 1 and type(args[0]) is str:
        return args[0]
    if tag == "y" and len(args) == 1 and type(args[0]) is str:
        return args[0].encode("latin-1")
    if tag in ("l", "t", "S", "F", "it") and len(args) == 1 and type(args[0]) is list:
        items = [decode(v, depth + 1, obj, fn) for v in args[0]]
        return {"l": list, "t": tuple, "S": set, "F": frozenset, "it": iter}[tag](items)
    if tag == "d" and len(args) == 1 and type(args[0]) is list:
        out = {}
        for pair in args[0]:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("malformed dict item")
            out[decode(pair[0], depth + 1, obj, fn)] = decode(pair[1], depth + 1, obj, fn)
        return out
    if tag == "o" and obj is not None and len(args) >= 1 and type(args[0]) is int:
        return obj(args[0], str(args[1]) if len(args) > 1 else "object")
    if tag == "cb" and fn is not None and len(args) >= 1 and type(args[0]) is list and len(args[0]) == 2 \
            and all(type(k) is int for k in args[0]):
        return fn(list(args[0]))
    if tag == "T" and len(args) == 1 and args[0] in _TYPES:
        return getattr(builtins, args[0])
    if tag == "r" and len(args) == 3 and all(type(a) is str and len(a) < 100 for a in args):
        return range(int(args[0]), int(args[1]), int(args[2]))
    raise ValueError(f"malformed value tagged {tag!r}")


def send(fd, obj):
    data = (json.dumps(obj) + "\n").encode()
    while data:
        n = os.write(fd, data)
        data = data[n:]


def recv(fd, buf, limit=64 << 20):
    """One JSON message from `fd` (`buf`: a bytearray kept between calls); None at EOF."""
    while b"\n" not in buf:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        buf.extend(chunk)
        if len(buf) > limit:
            raise ValueError("message too large")
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return json.loads(line.decode("utf-8"))
