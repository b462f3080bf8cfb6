"""Configuration spaces of schedule templates (TVM paper §5.1).

A template declares *knobs* — `cfg.define_split("tile_x", x, num_outputs=2)`,
`define_reorder`, `define_annotate`, `define_knob` — and reads the chosen value with
`cfg["tile_x"]`. The same template code runs against three kinds of `cfg`:

- `ConfigSpace`: collecting. define_* adds a knob; `cfg[name]` gives the knob's first
  candidate so that the template runs to the end.
- `ConfigEntity`: one point of a space. define_* is a no-op; `cfg[name]` gives the chosen value.
- `FallbackConfig`: no record exists. define_* adds the knob with its default value;
  `fallback_split` / `fallback_with` set heuristic defaults (`is_fallback` is True).

A space is the product of its knobs; it can hold billions of points. A point is an index in
mixed radix (the first knob is the least significant digit), so nothing is ever enumerated
beyond the candidates of one knob, and a reorder of n axes (n! permutations) is not even that.

Knob values as data (the tuning-record contract): a split is its list of factors with -1 first
(the remainder, as in TVM: [-1, 8, 16]), a reorder a permutation (list of ints), an annotate a
list of strings ("none", "unroll", "vec"), an other knob its JSON value.

Example:
    >>> space = ConfigSpace()
    >>> space.define_split("tile", 64, num_outputs=3)
    >>> space.define_knob("unroll", [0, 8, 32])
    >>> len(space)
    84
    >>> space.get(5)["tile"].size
    [-1, 32, 1]
"""
from __future__ import annotations

import json
import math
import random

from ..te.schedule import Stage
from ..tir.expr import IntImm, IterVar

__all__ = ["ConfigSpace", "ConfigEntity", "FallbackConfig", "SplitEntity", "ReorderEntity",
           "AnnotateEntity", "OtherOptionEntity", "Knob", "as_rng"]


# ------------------------------------------------------------------------------ helpers
def _extent(axis, knob: str) -> int:
    if isinstance(axis, bool):
        raise TypeError(f"knob '{knob}': an axis is a te IterVar or an int extent, got {axis!r}")
    if isinstance(axis, int):
        if axis < 1:
            raise ValueError(f"knob '{knob}': extent must be positive, got {axis}")
        return axis
    if isinstance(axis, IterVar):
        ext = axis.dom.extent if axis.dom is not None else None
        if not isinstance(ext, IntImm):
            raise ValueError(f"knob '{knob}': axis '{axis.var.name}' has no constant extent "
                             f"({ext}); give the extent as an int")
        return int(ext.value)
    raise TypeError(f"knob '{knob}': an axis is a te IterVar or an int extent, got {axis!r}")


def _stage(s, stage) -> Stage:
    return stage if isinstance(stage, Stage) else s[stage]


def _json_value(value, knob: str):
    """The canonical JSON form of a value (tuples become lists); error if not JSON."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        raise TypeError(f"knob '{knob}': value {value!r} is not a JSON value") from None


def _key(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class _RandomAdapter:
    """One interface over random.Random and numpy Generators: randbelow(n) for any n."""

    def __init__(self, rng):
        self._rng = rng
        self._numpy = hasattr(rng, "integers")

    def randbelow(self, n: int) -> int:
        if not self._numpy:
            return self._rng.randrange(n)
        if n <= 2 ** 62:
            return int(self._rng.integers(0, n))
        return random.Random(int(self._rng.integers(0, 2 ** 62))).randrange(n)


def as_rng(rng=None) -> _RandomAdapter:
    """Accept None / an int seed / random.Random / numpy Generator.

    Example:
        >>> as_rng(0).randbelow(10) in range(10)
        True
    """
    if isinstance(rng, _RandomAdapter):
        return rng
    if rng is None or isinstance(rng, int):
        return _RandomAdapter(random.Random(rng))
    if isinstance(rng, random.Random) or hasattr(rng, "integers"):
        return _RandomAdapter(rng)
    raise TypeError(f"rng must be None, an int seed, random.Random or a numpy Generator, got {rng!r}")


# ------------------------------------------------------------------------------ entities
class SplitEntity:
    """A split choice: `size` is [-1, f1, ..., fk] (outer remainder first, innermost last).

    Example:
        >>> xo, xi = cfg["tile_x"].apply(s, C, C.op.axis[1])  # doctest: +SKIP
    """

    __slots__ = ("size",)

    def __init__(self, size):
        self.size = list(size)

    def apply(self, s, stage, axis) -> list:
        """Split `axis` of `stage` (a Stage or a tensor of s) into len(size) loops, outer first."""
        st = _stage(s, stage)
        inners = []
        for factor in reversed(self.size[1:]):
            axis, inner = st.split(axis, factor=factor)
            inners.append(inner)
        return [axis] + inners[::-1]

    def to_json(self):
        return list(self.size)

    def __eq__(self, other):
        return isinstance(other, SplitEntity) and other.size == self.size

    def __hash__(self):
        return hash(("split", tuple(self.size)))

    def __repr__(self):
        return f"split{self.size}"


class ReorderEntity:
    """A permutation of the knob's axes: axes[perm[0]] becomes the outermost."""

    __slots__ = ("perm",)

    def __init__(self, perm):
        self.perm = list(perm)

    def apply(self, s, stage, axes) -> list:
        """Reorder the given loops of `stage`; returns them in their new order."""
        if len(axes) != len(self.perm):
            raise ValueError(f"reorder of {len(self.perm)} axes applied to {len(axes)} axes")
        ordered = [axes[k] for k in self.perm]
        _stage(s, stage).reorder(*ordered)
        return ordered

    def to_json(self):
        return list(self.perm)

    def __eq__(self, other):
        return isinstance(other, ReorderEntity) and other.perm == self.perm

    def __hash__(self):
        return hash(("reorder", tuple(self.perm)))

    def __repr__(self):
        return f"reorder{self.perm}"


class AnnotateEntity:
    """One annotation per axis: "none", "unroll" or "vec"."""

    __slots__ = ("anns",)

    def __init__(self, anns):
        self.anns = list(anns)

    def apply(self, s, stage, axes) -> None:
        """Unroll / vectorize the given loops of `stage` as chosen."""
        if len(axes) != len(self.anns):
            raise ValueError(f"annotate of {len(self.anns)} axes applied to {len(axes)} axes")
        st = _stage(s, stage)
        for axis, ann in zip(axes, self.anns):
            if ann == "unroll":
                st.unroll(axis)
            elif ann == "vec":
                st.vectorize(axis)

    def to_json(self):
        return list(self.anns)

    def __eq__(self, other):
        return isinstance(other, AnnotateEntity) and other.anns == self.anns

    def __hash__(self):
        return hash(("annotate", tuple(self.anns)))

    def __repr__(self):
        return f"annotate{self.anns}"


class OtherOptionEntity:
    """A value of a define_knob knob."""

    __slots__ = ("val",)

    def __init__(self, val):
        self.val = val

    def to_json(self):
        return self.val

    def __eq__(self, other):
        return isinstance(other, OtherOptionEntity) and _key(other.val) == _key(self.val)

    def __hash__(self):
        return hash(("other", _key(self.val)))

    def __repr__(self):
        return repr(self.val)


# ------------------------------------------------------------------------------ knobs
class Knob:
    """One dimension of a space: `knob.size` candidates, `knob[i]` the i-th entity,
    `knob.index_of(value)` back (value: an entity or its JSON form). Index 0 is the default."""

    kind = "?"

    def __init__(self, name: str):
        self.name = name

    @property
    def size(self) -> int:
        """Number of candidates (an unbounded int: len() cannot exceed 2**63)."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        raise NotImplementedError

    def _index(self, value):
        raise NotImplementedError

    def index_of(self, value) -> int:
        if hasattr(value, "to_json"):
            value = value.to_json()
        i = self._index(_json_value(value, self.name))
        if i is None:
            raise ValueError(f"knob '{self.name}': {value!r} is not a candidate of this "
                             f"{self.kind} knob ({self.describe()})")
        return i

    def _check(self, i: int) -> int:
        if not 0 <= i < self.size:
            raise IndexError(f"knob '{self.name}': index {i} out of range [0, {self.size})")
        return i

    def describe(self) -> str:
        return f"{self.size} candidates"


class SplitKnob(Knob):
    """Factor lists of `extent` into `num_outputs` loops. Candidate 0 is [-1, 1, ..., 1].

    policy "factors": inner factors whose product divides the extent (no tail);
    "power2": inner factors powers of two, product at most the extent (a tail is allowed);
    "verbose": each inner factor a divisor or a power of two. max_factor bounds each factor.
    """

    kind = "split"

    def __init__(self, name, extent, num_outputs, policy, max_factor):
        super().__init__(name)
        if policy not in ("factors", "power2", "verbose"):
            raise ValueError(f"knob '{name}': split policy is 'factors', 'power2' or 'verbose', "
                             f"got {policy!r}")
        if not isinstance(num_outputs, int) or num_outputs < 1:
            raise ValueError(f"knob '{name}': num_outputs must be a positive int, got {num_outputs!r}")
        self.extent, self.num_outputs, self.policy = extent, num_outputs, policy
        self.max_factor = extent if max_factor is None else int(max_factor)
        self._entities: list[tuple] = []
        self._generate(num_outputs - 1, 1, [])
        self._lookup = {e: i for i, e in enumerate(self._entities)}

    def _choices(self, used: int) -> list[int]:
        limit = min(self.max_factor, self.extent // used)
        divisors = [f for f in range(1, limit + 1) if (self.extent // used) % f == 0] \
            if self.extent % used == 0 else []
        power2 = [1 << b for b in range(limit.bit_length()) if (1 << b) <= limit]
        if self.policy == "factors":
            return divisors if divisors else [1]
        if self.policy == "power2":
            return power2
        return sorted(set(divisors) | set(power2))

    def _generate(self, left: int, used: int, inner: list) -> None:
        # `inner` lists the chosen factors innermost first; candidates read outer to inner.
        if left == 0:
            self._entities.append((-1,) + tuple(reversed(inner)))
            return
        for f in self._choices(used):
            self._generate(left - 1, used * f, inner + [f])

    @property
    def size(self):
        return len(self._entities)

    def __getitem__(self, i):
        return SplitEntity(self._entities[self._check(i)])

    def _index(self, value):
        if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
            return None
        return self._lookup.get(tuple(value))

    def describe(self):
        return (f"extent {self.extent} into {self.num_outputs}, policy {self.policy}, "
                f"{self.size} candidates")


class ReorderKnob(Knob):
    """Permutations of n axes: all n! (indexed by Lehmer code, never listed) or a candidate list."""

    kind = "reorder"

    def __init__(self, name, n, candidates):
        super().__init__(name)
        self.n = n
        self.candidates = candidates          # None: all permutations
        if candidates is not None:
            self._lookup = {tuple(p): i for i, p in enumerate(candidates)}

    @property
    def size(self):
        return math.factorial(self.n) if self.candidates is None else len(self.candidates)

    def __getitem__(self, i):
        self._check(i)
        if self.candidates is not None:
            return ReorderEntity(self.candidates[i])
        pool, perm = list(range(self.n)), []
        for k in range(self.n, 0, -1):
            digit, i = divmod(i, math.factorial(k - 1))
            perm.append(pool.pop(digit))
        return ReorderEntity(perm)

    def _index(self, value):
        if not isinstance(value, list) or sorted(value) != list(range(self.n)) \
                or not all(isinstance(v, int) for v in value):
            return None
        if self.candidates is not None:
            return self._lookup.get(tuple(value))
        pool, index = list(range(self.n)), 0
        for k, v in enumerate(value):
            pos = pool.index(v)
            index += pos * math.factorial(self.n - 1 - k)
            pool.pop(pos)
        return index

    def describe(self):
        what = "all permutations" if self.candidates is None else "candidate list"
        return f"{self.n} axes, {what}, {self.size} candidates"


_ANNOTATE_POLICIES = {
    "try_unroll": (("none", "unroll"), ("none", "unroll")),
    "try_vec": (("none",), ("none", "vec")),
    "try_unroll_vec": (("none", "unroll"), ("none", "unroll", "vec")),
}


class AnnotateKnob(Knob):
    """Per-axis choices; "vec" is only offered on the last (innermost) axis, since a
    vectorized loop must be innermost. Mixed radix over the axes, first axis least significant."""

    kind = "annotate"

    def __init__(self, name, n, policy):
        super().__init__(name)
        if policy not in _ANNOTATE_POLICIES:
            raise ValueError(f"knob '{name}': annotate policy is one of "
                             f"{', '.join(_ANNOTATE_POLICIES)}, got {policy!r}")
        if n < 1:
            raise ValueError(f"knob '{name}': annotate needs at least one axis")
        body, last = _ANNOTATE_POLICIES[policy]
        self.policy = policy
        self.options = [body] * (n - 1) + [last]

    @property
    def size(self):
        return math.prod(len(o) for o in self.options)

    def __getitem__(self, i):
        self._check(i)
        anns = []
        for opts in self.options:
            i, digit = divmod(i, len(opts))
            anns.append(opts[digit])
        return AnnotateEntity(anns)

    def _index(self, value):
        if not isinstance(value, list) or len(value) != len(self.options):
            return None
        index, stride = 0, 1
        for v, opts in zip(value, self.options):
            if v not in opts:
                return None
            index += opts.index(v) * stride
            stride *= len(opts)
        return index

    def describe(self):
        return f"{len(self.options)} axes, policy {self.policy}, {self.size} candidates"


class OtherKnob(Knob):
    """A list of JSON values (define_knob)."""

    kind = "other"

    def __init__(self, name, values):
        super().__init__(name)
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(f"knob '{name}': values must be a list, got {values!r}")
        self.values = [_json_value(v, name) for v in values]
        if not self.values:
            raise ValueError(f"knob '{name}': needs at least one value")
        self._lookup = {}
        for i, v in enumerate(self.values):
            if self._lookup.setdefault(_key(v), i) != i:
                raise ValueError(f"knob '{name}': value {v!r} is listed twice")

    @property
    def size(self):
        return len(self.values)

    def __getitem__(self, i):
        return OtherOptionEntity(self.values[self._check(i)])

    def _index(self, value):
        return self._lookup.get(_key(value))

    def describe(self):
        return f"values {self.values}"


# ------------------------------------------------------------------------------ the space
class _Definer:
    """The define_* calls shared by ConfigSpace and FallbackConfig (which both collect knobs)."""

    def _add(self, knob: Knob) -> None:
        raise NotImplementedError

    def define_split(self, name, axis_or_extent, num_outputs=2, policy="factors", max_factor=None):
        """Declare a split of an axis (a te IterVar of constant extent, or an int extent).

        Example:
            >>> cfg.define_split("tile_x", C.op.axis[1], num_outputs=3)  # doctest: +SKIP
        """
        self._add(SplitKnob(name, _extent(axis_or_extent, name), num_outputs, policy, max_factor))

    def define_reorder(self, name, axes, policy="all", candidate=None):
        """Declare a reorder of `axes` (IterVars or any placeholders; only their count matters
        for "all"); policy "candidate" takes a list of orders of those same axes (or of ints).

        Example:
            >>> cfg.define_reorder("order", [yi, ki, xi], "candidate",
            ...                    candidate=[[yi, ki, xi], [ki, yi, xi]])  # doctest: +SKIP
        """
        axes = list(axes)
        if policy == "all":
            if candidate is not None:
                raise ValueError(f"knob '{name}': policy 'all' takes no candidate list")
            self._add(ReorderKnob(name, len(axes), None))
            return
        if policy != "candidate":
            raise ValueError(f"knob '{name}': reorder policy is 'all' or 'candidate', got {policy!r}")
        if not candidate:
            raise ValueError(f"knob '{name}': policy 'candidate' needs a non-empty candidate list")
        perms = []
        for order in candidate:
            perm = [a if isinstance(a, int) and not isinstance(a, bool) else
                    next((k for k, b in enumerate(axes) if b is a), None) for a in order]
            if None in perm or sorted(perm) != list(range(len(axes))):
                raise ValueError(f"knob '{name}': candidate {order!r} is not an order of the "
                                 f"{len(axes)} given axes")
            if perm in perms:
                raise ValueError(f"knob '{name}': candidate {order!r} is listed twice")
            perms.append(perm)
        self._add(ReorderKnob(name, len(axes), perms))

    def define_annotate(self, name, axes, policy="try_unroll"):
        """Declare unroll / vectorize choices for `axes` ("vec" only on the last one).

        Example:
            >>> cfg.define_annotate("ann", [yi, xi], policy="try_unroll_vec")  # doctest: +SKIP
        """
        self._add(AnnotateKnob(name, len(list(axes)), policy))

    def define_knob(self, name, values):
        """Declare a knob taking one of `values` (JSON values).

        Example:
            >>> cfg.define_knob("auto_unroll", [0, 8, 32])  # doctest: +SKIP
        """
        self._add(OtherKnob(name, values))


class ConfigSpace(_Definer):
    """The product of a template's knobs; also the `cfg` a template sees while collecting.

    Example:
        >>> space = ConfigSpace()
        >>> space.define_split("s", 1024, num_outputs=5); space.define_reorder("r", range(6))
        >>> len(space)
        720720
        >>> space.from_json(space.get(123456).to_json()).index
        123456
    """

    is_fallback = False

    def __init__(self):
        self._knobs: dict[str, Knob] = {}

    def _add(self, knob: Knob) -> None:
        if not isinstance(knob.name, str) or not knob.name:
            raise TypeError(f"a knob name is a non-empty string, got {knob.name!r}")
        if knob.name in self._knobs:
            raise ValueError(f"knob '{knob.name}' is defined twice in this template")
        self._knobs[knob.name] = knob

    @property
    def knobs(self) -> dict:
        """The knobs by name, in definition order (the first is the least significant digit)."""
        return dict(self._knobs)

    @property
    def size(self) -> int:
        """Number of configs, as an unbounded int (len() works up to 2**63)."""
        return math.prod(k.size for k in self._knobs.values())

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, name):
        # While collecting, a template reads the first candidate so that it runs to the end.
        return self._knob(name)[0]

    def _knob(self, name) -> Knob:
        knob = self._knobs.get(name)
        if knob is None:
            raise KeyError(f"no knob '{name}' in this config space (knobs: "
                           f"{', '.join(self._knobs) or 'none'}); define it first")
        return knob

    # ---------------------------------------------------------------- index <-> config
    def _check_index(self, index) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"a config index is an int, got {index!r}")
        if not 0 <= index < self.size:
            raise ValueError(f"config index {index} out of range [0, {self.size})")
        return index

    def point(self, index: int) -> tuple:
        """The per-knob indices of a config index (mixed radix, first knob least significant).

        Example:
            >>> space.point(5)  # doctest: +SKIP
            (2, 1)
        """
        self._check_index(index)
        digits = []
        for knob in self._knobs.values():
            index, digit = divmod(index, knob.size)
            digits.append(digit)
        return tuple(digits)

    def index_of_point(self, point) -> int:
        """Back from per-knob indices to the config index.

        Example:
            >>> space.index_of_point(space.point(17)) == 17  # doctest: +SKIP
            True
        """
        point = list(point)
        if len(point) != len(self._knobs):
            raise ValueError(f"a point has one index per knob ({len(self._knobs)}), got {len(point)}")
        index, stride = 0, 1
        for digit, knob in zip(point, self._knobs.values()):
            index += knob._check(int(digit)) * stride
            stride *= knob.size
        return index

    def get(self, index: int) -> "ConfigEntity":
        """The config at `index`.

        Example:
            >>> cfg = space.get(0); cfg.index  # doctest: +SKIP
            0
        """
        point = self.point(index)
        values = {name: knob[d] for (name, knob), d in zip(self._knobs.items(), point)}
        return ConfigEntity(self, index, values)

    def index_of(self, knob_values: dict) -> int:
        """The index of the config with these knob values (entities or their JSON forms).

        Example:
            >>> space.index_of({"tile": [-1, 32, 1], "unroll": 0})  # doctest: +SKIP
            5
        """
        if not isinstance(knob_values, dict):
            raise TypeError(f"knob values are a dict name -> value, got {knob_values!r}")
        unknown = [n for n in knob_values if n not in self._knobs]
        if unknown:
            raise ValueError(f"unknown knob '{unknown[0]}' (knobs of this space: "
                             f"{', '.join(self._knobs)})")
        missing = [n for n in self._knobs if n not in knob_values]
        if missing:
            raise ValueError(f"knob '{missing[0]}' has no value")
        return self.index_of_point(k.index_of(knob_values[n]) for n, k in self._knobs.items())

    def from_json(self, d: dict) -> "ConfigEntity":
        """The config of a record's {"index": int, "knobs": {...}}, validated against this space
        (knobs the record lacks at the end of the space take their first candidate).

        Example:
            >>> space.from_json({"index": 5, "knobs": {"tile": [-1, 32, 1], "unroll": 0}})  # doctest: +SKIP
        """
        if not isinstance(d, dict) or "knobs" not in d or "index" not in d:
            raise ValueError(f"a config is a dict with 'index' and 'knobs', got {d!r}")
        knobs = d["knobs"]
        if isinstance(knobs, dict):
            # Knobs appended to a template after the record was written take their first
            # candidate (the template's old behaviour); the index, whose most significant
            # digits they are, then still matches. A missing knob before a present one stays
            # an error.
            names = list(self._knobs)
            present = [k for k, n in enumerate(names) if n in knobs]
            trailing = names[present[-1] + 1:] if present else []
            knobs = {**knobs, **{n: self._knobs[n][0] for n in trailing}}
        index = self.index_of(knobs)
        if d["index"] != index:
            raise ValueError(f"config index {d['index']!r} does not match its knobs (which are "
                             f"config {index} of this space of {self.size})")
        return self.get(index)

    # ---------------------------------------------------------------- walking
    def _mutable(self) -> list[int]:
        return [k for k, knob in enumerate(self._knobs.values()) if knob.size > 1]

    def neighbour(self, index: int, rng=None) -> int:
        """A config differing in one knob, moved to an adjacent candidate (index +-1 in that
        knob); the index itself when no knob has a choice.

        Example:
            >>> space.neighbour(0, rng=1) != 0  # doctest: +SKIP
            True
        """
        rng = as_rng(rng)
        point = list(self.point(index))
        mutable = self._mutable()
        if not mutable:
            return index
        k = mutable[rng.randbelow(len(mutable))]
        size = list(self._knobs.values())[k].size
        step = 1 if rng.randbelow(2) else -1
        if not 0 <= point[k] + step < size:
            step = -step
        point[k] += step
        return self.index_of_point(point)

    def walk(self, index: int, rng=None, steps: int = 1) -> int:
        """`steps` random moves, each setting one knob to a different random candidate.

        Example:
            >>> space.walk(0, rng=1, steps=3)  # doctest: +SKIP
        """
        rng = as_rng(rng)
        point = list(self.point(index))
        knobs = list(self._knobs.values())
        mutable = self._mutable()
        for _ in range(steps if mutable else 0):
            k = mutable[rng.randbelow(len(mutable))]
            new = rng.randbelow(knobs[k].size - 1)
            point[k] = new + (new >= point[k])
        return self.index_of_point(point)

    def sample(self, rng=None, n: int = 1) -> list[int]:
        """n distinct random config indices (uniform over the space).

        Example:
            >>> len(set(space.sample(0, 10)))  # doctest: +SKIP
            10
        """
        rng = as_rng(rng)
        total = self.size
        if n > total:
            raise ValueError(f"cannot sample {n} distinct configs from a space of {total}")
        if n * 2 > total:
            pool = list(range(total))
            for k in range(n):
                j = k + rng.randbelow(total - k)
                pool[k], pool[j] = pool[j], pool[k]
            return pool[:n]
        seen: dict[int, None] = {}
        while len(seen) < n:
            seen.setdefault(rng.randbelow(total), None)
        return list(seen)

    def __str__(self):
        lines = [f"ConfigSpace of {self.size} configs, {len(self._knobs)} knobs"]
        for k, knob in enumerate(self._knobs.values()):
            lines.append(f"  {k:2d} {knob.name}: {knob.kind}, {knob.describe()}")
        return "\n".join(lines)

    __repr__ = __str__


class ConfigEntity:
    """One config of a space: `cfg[name]` is the chosen entity, `cfg.index` its index.

    Example:
        >>> cfg = space.get(7)  # doctest: +SKIP
        >>> cfg["tile_x"].size, cfg.to_json()["index"]  # doctest: +SKIP
        ([-1, 4], 7)
    """

    is_fallback = False

    def __init__(self, space: ConfigSpace, index: int, values: dict):
        self.space = space
        self.index = index
        self._values = values

    def __getitem__(self, name):
        value = self._values.get(name)
        if value is None:
            raise KeyError(f"no knob '{name}' in this config (knobs: {', '.join(self._values)})")
        return value

    def _define(self, name, *args, **kwargs) -> None:
        # Reading a config: the knob exists already; a missing one means the config belongs
        # to another template (or the template changed since the space was collected).
        if name not in self._values:
            raise ValueError(f"the template defines knob '{name}', which the config's space does "
                             f"not have (knobs: {', '.join(self._values)})")

    define_split = define_reorder = define_annotate = define_knob = _define

    @property
    def knobs(self) -> dict:
        return dict(self._values)

    def to_json(self) -> dict:
        """{"index": int, "knobs": {name: JSON value}} (the tuning-record form)."""
        return {"index": self.index, "knobs": {n: v.to_json() for n, v in self._values.items()}}

    def __eq__(self, other):
        return isinstance(other, ConfigEntity) and other.to_json() == self.to_json()

    def __hash__(self):
        return hash(self.index)

    def __repr__(self):
        knobs = ", ".join(f"{n}={v!r}" for n, v in self._values.items())
        return f"Config#{self.index}({knobs})"


class FallbackConfig(_Definer):
    """The config a template gets when no record exists (`is_fallback` is True).

    Knobs take the first candidate of their knob unless the template sets a heuristic default:
    a split [-1, 1, ..., 1] (no tiling), a reorder the identity (for "all"; else the first
    candidate), an annotate all "none", an other knob its first value.

    Example:
        >>> cfg = FallbackConfig()
        >>> cfg.define_split("tile_x", 48, num_outputs=2)
        >>> if cfg.is_fallback:
        ...     cfg.fallback_split("tile_x", [-1, 16])     # inner factor at most 16
        >>> cfg["tile_x"].size
        [-1, 16]
    """

    is_fallback = True

    def __init__(self):
        self.space = ConfigSpace()
        self._values: dict = {}

    def _add(self, knob: Knob) -> None:
        self.space._add(knob)
        self._values[knob.name] = knob[0]

    def __getitem__(self, name):
        if name not in self._values:
            self.space._knob(name)
        return self._values[name]

    def _defined(self, name, what) -> Knob:
        knob = self.space._knobs.get(name)
        if knob is None:
            raise KeyError(f"{what}: knob '{name}' is not defined yet; call define_* first")
        return knob

    def fallback_split(self, name: str, sizes) -> None:
        """Choose the split whose inner factors are the largest candidates at most `sizes`
        (innermost first; sizes[0] is ignored, -1 by convention).

        Example:
            >>> cfg.fallback_split("tile_x", [-1, 16])  # doctest: +SKIP
        """
        knob = self._defined(name, "fallback_split")
        if not isinstance(knob, SplitKnob):
            raise ValueError(f"fallback_split: knob '{name}' is a {knob.kind} knob, not a split")
        sizes = list(sizes)
        if len(sizes) != knob.num_outputs:
            raise ValueError(f"fallback_split: knob '{name}' splits into {knob.num_outputs} "
                             f"loops, got {len(sizes)} sizes {sizes}")
        entities = knob._entities
        for pos in range(len(sizes) - 1, 0, -1):
            bound = sizes[pos]
            fitting = [e for e in entities if e[pos] <= bound] or [min(entities, key=lambda e: e[pos])]
            best = max(e[pos] for e in fitting)
            entities = [e for e in fitting if e[pos] == best]
        self._values[name] = SplitEntity(entities[0])

    def fallback_with(self, name: str, value) -> None:
        """Set a knob's default to `value` (an entity or its JSON form; must be a candidate).

        Example:
            >>> cfg.fallback_with("auto_unroll", 8)  # doctest: +SKIP
        """
        knob = self._defined(name, "fallback_with")
        self._values[name] = knob[knob.index_of(value)]

    @property
    def knobs(self) -> dict:
        return dict(self._values)

    @property
    def index(self) -> int:
        """The index of these defaults in the template's space."""
        return self.space.index_of(self._values)

    def to_json(self) -> dict:
        return {"index": self.index, "knobs": {n: v.to_json() for n, v in self._values.items()}}

    def __repr__(self):
        knobs = ", ".join(f"{n}={v!r}" for n, v in self._values.items())
        return f"FallbackConfig({knobs})"
