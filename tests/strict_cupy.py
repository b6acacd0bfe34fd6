"""A strict stand-in for CuPy, for running the GPU branches on CPU: NumPy underneath, CuPy's
refusals on top.

``install(monkeypatch)`` registers a fresh module as ``cupy`` (``sys.modules``), so code that
imports the library by name (``library="cupy"``), or by its arrays' module
(``type(x).__module__``), gets it. Its ``ndarray`` holds a NumPy array and behaves as a device
array does where code is most likely to go wrong on a GPU:

- no implicit host conversion: ``np.asarray(x)``/``__array__`` raise ``TypeError``, as CuPy's
  do; ``x.get()``, ``cupy.asnumpy(x)``, ``float(x)``, ``x.item()`` and ``x.tolist()`` are the
  explicit ways to the host;
- no mixed operands: a NumPy array (even a 0-d one) given to an operator, a ufunc or a module
  function raises ``TypeError`` (Python and NumPy scalars are taken); ``cupy.asarray`` and
  ``cupy.array`` copy host data in, and, as in CuPy, advanced indices and ``histogram``'s
  ``bins`` may be host arrays;
- reductions, scalar indexing and NumPy functions called on it (``__array_function__``) give
  0-d or n-d stand-in arrays, never NumPy scalars;
- it is not a ``numpy.ndarray``, and has ``__cuda_array_interface__``, so the library's
  host/device tests (``launch.on_host``, ``backends.to_host``) route it as device data.

Only what the GPU branches under test call is provided; anything else is an ``AttributeError``.
``cupy.random.default_rng`` takes an integer seed only (recorded in ``seeds``) and has the state
layout of CuPy's cuRAND generators (``cupy/random/_bit_generator.pyx``): the seed is cut to
``SeedSequence(seed).generate_state(1, uint32)[0]``, and element ``i`` of a draw comes from state
``i mod generator_states`` of that many parallel states (CuPy's
``8 * 256 * cudaDevAttrMultiProcessorCount``, 32,768; a test may set the module's
``generator_states``). The library's own device generator
(:class:`daskgpu.toolkit.numeric.CounterGenerator`) runs on the stand-in's arrays; the first key
word of each one made while the stand-in is installed is recorded in ``seeds`` too, so that a test
can tell which block's sequence the device drew.

Its cuDF part (``DataFrame``, ``Series``, ``Index``: classes in ``cudf`` modules) holds pandas
objects; a column's ``.values`` is a stand-in array, and the host is reached only through
``to_pandas``/``to_numpy``.

What it cannot show: CuPy's and cuDF's numerics, memory, streams and kernels (a Numba kernel
cannot run on it: see :func:`host_kernel`).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

import numpy as np
import pandas as pd
from numpy.lib.mixins import NDArrayOperatorsMixin

IMPLICIT_CONVERSION = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` "
                       "to construct a NumPy array explicitly.")


def _refused(value) -> TypeError:
    return TypeError(f"Unsupported type {type(value)}")


def _device_values(value):
    """``value`` as NumPy for the computation: stand-ins unwrapped, host arrays refused."""
    if isinstance(value, ndarray):
        return value._values
    if isinstance(value, np.ndarray):
        raise _refused(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_device_values(v) for v in value)
    return value


def _index_values(key):
    """An index: stand-ins unwrapped; host index arrays and lists taken, as CuPy copies them."""
    if isinstance(key, ndarray):
        return key._values
    if isinstance(key, tuple):
        return tuple(_index_values(k) for k in key)
    return key


def _wrapped(result):
    """NumPy results as stand-ins (NumPy scalars as 0-d arrays); tuples item by item."""
    if isinstance(result, np.ndarray):
        return ndarray(result)
    if isinstance(result, np.generic):
        return ndarray(np.asarray(result))
    if isinstance(result, tuple):
        return tuple(_wrapped(r) for r in result)
    if isinstance(result, list):
        return [_wrapped(r) for r in result]
    return result


def _strict(function):
    """``function`` taking stand-ins (NumPy arrays refused) and giving stand-ins."""

    def call(*args, **kwargs):
        return _wrapped(function(*_device_values(args),
                                 **{k: _device_values(v) for k, v in kwargs.items()}))

    call.__name__ = getattr(function, "__name__", "function")
    return call


class ndarray(NDArrayOperatorsMixin):  # noqa: N801 - CuPy's name
    """A device array as CuPy's behaves, holding its values in a NumPy array."""

    __array_priority__ = 100

    def __init__(self, values: np.ndarray):
        assert isinstance(values, np.ndarray), type(values)
        self._values = values

    shape = property(lambda self: self._values.shape)
    dtype = property(lambda self: self._values.dtype)
    ndim = property(lambda self: self._values.ndim)
    size = property(lambda self: self._values.size)
    itemsize = property(lambda self: self._values.itemsize)
    nbytes = property(lambda self: self._values.nbytes)
    strides = property(lambda self: self._values.strides)
    flags = property(lambda self: self._values.flags)
    T = property(lambda self: ndarray(self._values.T))
    real = property(lambda self: ndarray(self._values.real))
    imag = property(lambda self: ndarray(self._values.imag))

    @property
    def __cuda_array_interface__(self):
        interface = self._values.__array_interface__
        return {"shape": self.shape, "typestr": self.dtype.str, "data": interface["data"],
                "strides": interface["strides"], "version": 3}

    def __array__(self, *args, **kwargs):
        raise TypeError(IMPLICIT_CONVERSION)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.pop("out", None)
        if out is not None:
            if not all(isinstance(o, ndarray) for o in out):
                raise _refused(next(o for o in out if not isinstance(o, ndarray)))
            kwargs = {k: _device_values(v) for k, v in kwargs.items()}
            kwargs["out"] = tuple(o._values for o in out)
        else:
            kwargs = {k: _device_values(v) for k, v in kwargs.items()}
        result = getattr(ufunc, method)(*_device_values(inputs), **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _wrapped(result)

    def __array_function__(self, func, types, args, kwargs):
        """A NumPy function called on it runs as CuPy's of that name (``numpy.linalg.norm``:
        ``cupy.linalg.norm``), as CuPy dispatches them; one CuPy lacks is a ``TypeError``."""
        mirror = sys.modules.get("cupy")
        for part in [*func.__module__.split(".")[1:], func.__name__]:
            if part not in ("linalg", "fft", func.__name__):
                continue  # NumPy's private modules (numpy._core.fromnumeric)
            mirror = getattr(mirror, part, None)
        if mirror is None or not callable(mirror):
            return NotImplemented
        return mirror(*args, **kwargs)

    def __getitem__(self, key):
        return ndarray(np.asarray(self._values[_index_values(key)]))

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray) and value.ndim > 0:
            basic = all(isinstance(k, (int, slice, type(Ellipsis), type(None)))
                        for k in (key if isinstance(key, tuple) else (key,)))
            if basic:  # CuPy fills the view with a scalar, and has none here
                raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
        self._values[_index_values(key)] = (value._values if isinstance(value, ndarray)
                                            else value)

    def __len__(self):
        return len(self._values)

    def __iter__(self):
        return (ndarray(np.asarray(v)) for v in self._values)

    def __bool__(self):
        return bool(self._values)

    def __float__(self):
        return float(self._values)

    def __int__(self):
        return int(self._values)

    def __complex__(self):
        return complex(self._values)

    def __repr__(self):
        return f"strict_cupy.ndarray({self._values!r})"

    def get(self, stream=None) -> np.ndarray:
        """A NumPy copy, on the host."""
        return self._values.copy()

    def item(self):
        """The single element, as a Python scalar (a synchronising copy to the host)."""
        return self._values.item()

    def tolist(self):
        """The elements as (nested) Python lists, on the host."""
        return self._values.tolist()

    def astype(self, dtype, copy=True):
        """The values converted to ``dtype``, on the device."""
        return ndarray(self._values.astype(dtype, copy=copy))


for _name in ("copy", "reshape", "ravel", "flatten", "transpose", "squeeze", "swapaxes", "sum",
              "mean", "max", "min", "argmax", "argmin", "any", "all", "cumsum", "prod", "dot",
              "clip", "round", "nonzero", "fill", "sort", "argsort", "take", "conj", "var",
              "std", "view"):
    setattr(ndarray, _name, (lambda name: lambda self, *args, **kwargs: _wrapped(
        getattr(self._values, name)(*_device_values(args),
                                    **{k: _device_values(v) for k, v in kwargs.items()})))(_name))
ndarray.__module__ = "cupy._core.core"

#: Module functions that compute on device arrays only (NumPy arrays refused).
FUNCTIONS = (
    "zeros", "empty", "ones", "full", "arange", "linspace", "zeros_like", "empty_like",
    "ones_like", "full_like", "abs", "absolute", "maximum", "minimum", "sqrt", "exp", "log",
    "subtract", "add", "multiply", "divide", "floor", "isfinite", "isnan", "argmin", "argmax",
    "take_along_axis", "bincount", "where", "einsum", "concatenate", "stack", "flatnonzero",
    "nonzero", "partition", "sort", "argsort", "moveaxis", "dot", "matmul", "sum", "cumsum",
    "searchsorted", "clip", "ascontiguousarray", "unique", "count_nonzero", "diff", "any", "all",
    "argpartition", "conj", "sin", "cos", "transpose",
    "take", "tensordot",  # dask.array registers both for CuPy arrays (concatenating blocks)
)
CONSTANTS = ("inf", "nan", "pi", "newaxis", "float16", "float32", "float64", "complex64",
             "complex128", "int8", "int16", "int32", "int64", "uint8", "uint32", "uint64",
             "bool_", "dtype", "integer", "floating", "issubdtype", "result_type")
LINALG = ("qr", "svd", "norm", "eigh", "solve", "cholesky")
FFT = ("fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftfreq",
       "rfftfreq")
#: CuPy's states of one cuRAND generator: ``8 * 256 * cudaDevAttrMultiProcessorCount``.
GENERATOR_STATES = 8 * 256 * 16


def asarray(a, dtype=None):
    """``a`` on the device: host data (NumPy, lists, scalars) copied in, stand-ins kept."""
    if isinstance(a, ndarray):
        return a if dtype is None or a.dtype == dtype else a.astype(dtype)
    return ndarray(np.array(a, dtype=dtype))


def array(a, dtype=None, copy=True, order="K"):
    """A device copy of ``a`` (host data or a stand-in), in ``order`` as CuPy's."""
    if isinstance(a, ndarray):
        return ndarray(a._values.astype(dtype or a.dtype, order=order, copy=True))
    return ndarray(np.array(a, dtype=dtype, order=order))


def asnumpy(a) -> np.ndarray:
    """``a`` on the host: a copy of a stand-in's values; host data as NumPy."""
    return a.get() if isinstance(a, ndarray) else np.asarray(a)


def histogram(x, bins=10, range=None, weights=None):  # noqa: A002 - NumPy's name
    """NumPy's histogram of device ``x``; ``bins`` may be host edges (CuPy copies them in)."""
    if isinstance(bins, ndarray):
        bins = bins._values
    counts, edges = np.histogram(_device_values(x), bins=bins, range=range,
                                 weights=_device_values(weights))
    return ndarray(counts), ndarray(np.asarray(edges))


class Generator:
    """CuPy's ``default_rng``: an integer seed only, kept as 32 bits; element ``i`` of a draw
    from state ``i mod states``, each state advancing by the values it gave."""

    def __init__(self, seed, seeds: list, states: int):
        if not isinstance(seed, int):
            raise TypeError(f"seed must be an integer, not {type(seed)}")
        seeds.append(seed)
        self.seed32 = int(np.random.SeedSequence(seed).generate_state(1, np.uint32)[0])
        self.states = states
        self._given = np.zeros(states, dtype=np.uint64)  # values each state has given

    def _words(self, count: int, lane: int) -> np.ndarray:
        """One 64-bit word for each of ``count`` elements: a hash of (seed, state, its count)."""
        i = np.arange(count, dtype=np.uint64)
        state = i % np.uint64(self.states)
        nth = self._given[state] + i // np.uint64(self.states)
        seed = (self.seed32 * 0x9E3779B97F4A7C15) % 2**64
        word = (np.uint64(seed)
                ^ state * np.uint64(0xBF58476D1CE4E5B9) ^ nth * np.uint64(0x94D049BB133111EB)
                ^ np.uint64(lane))
        for shift, multiplier in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB),
                                  (31, 0x9E3779B97F4A7C15), (29, 0xD6E8FEB86659FD93)):
            word = (word ^ (word >> np.uint64(shift))) * np.uint64(multiplier)
        return word ^ (word >> np.uint64(32))

    def _advance(self, count: int) -> None:
        full, rest = divmod(count, self.states)
        self._given += np.uint64(full)
        self._given[:rest] += np.uint64(1)

    def _uniform(self, count: int, lane: int = 0) -> np.ndarray:
        return (self._words(count, lane) >> np.uint64(11)) * 2.0**-53

    def _draw(self, size, dtype, out, values):
        if out is not None:
            if not isinstance(out, ndarray):
                raise _refused(out)
            size, dtype = out.shape, out.dtype
        shape = () if size is None else (size,) if isinstance(size, int) else tuple(size)
        count = int(np.prod(shape, dtype=np.int64))
        drawn = values(count).astype(dtype).reshape(shape)
        self._advance(count)
        if out is None:
            return ndarray(drawn)
        out._values[...] = drawn
        return out

    def random(self, size=None, dtype=np.float64, out=None):
        """Uniform on [0, 1)."""
        return self._draw(size, dtype, out, self._uniform)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        """Standard normal (Box-Muller of two values of the element's state)."""
        def values(count):
            u1, u2 = 1.0 - self._uniform(count, 1), self._uniform(count, 2)
            return np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2)
        return self._draw(size, dtype, out, values)

    def uniform(self, low=0.0, high=1.0, size=None):
        """Uniform on [low, high), float64."""
        return self._draw(size, np.float64, None,
                          lambda count: low + (high - low) * self._uniform(count))

    def integers(self, low, high=None, size=None, dtype=np.int64):
        """Integers in [low, high)."""
        if high is None:
            low, high = 0, low
        return self._draw(size, dtype, None, lambda count: np.floor(
            low + (high - low) * self._uniform(count)))


def _recording_device_generators(seeds: list):
    """The library's device generator, recording the first key word of each one made."""
    from daskgpu.toolkit import numeric

    class Recorded(numeric.CounterGenerator):
        def __init__(self, xp, sequence):
            super().__init__(xp, sequence)
            seeds.append(self.key[0])

    return Recorded


def get_array_module(*args):
    """This module where any argument is a stand-in, else NumPy."""
    return sys.modules["cupy"] if any(isinstance(a, ndarray) for a in args) else np


def _stream(events: list):
    return types.SimpleNamespace(ptr=0x5EED, synchronize=lambda: events.append(("sync",)))


class PlanCache:
    """CuPy's per-thread cuFFT plan cache (``cupy.fft.config.get_plan_cache()``): every
    transform adds its plan (recorded in ``plans``), ``clear`` empties it."""

    def __init__(self, events: list):
        self.plans: list = []
        self._events = events

    def clear(self):
        self.plans.clear()
        self._events.append(("plans cleared",))

    def get_curr_size(self) -> int:
        return len(self.plans)


def _fft_namespace(events: list) -> types.SimpleNamespace:
    """``cupy.fft``: NumPy's transforms, each queued (an event) and leaving a plan in the
    calling thread's cache; ``config.get_plan_cache()``."""
    import threading

    local = threading.local()

    def get_plan_cache():
        if not hasattr(local, "cache"):
            local.cache = PlanCache(events)
        return local.cache

    def queued(name):
        strict = _strict(getattr(np.fft, name))

        def transform(a, *args, **kwargs):
            get_plan_cache().plans.append((name, getattr(a, "shape", None), kwargs.get("axis")))
            events.append(("fft", name))
            return strict(a, *args, **kwargs)
        return transform

    space = types.SimpleNamespace(**{n: queued(n) for n in FFT})
    space.config = types.SimpleNamespace(get_plan_cache=get_plan_cache)
    return space


def namespace() -> types.ModuleType:
    """A fresh ``cupy`` module of stand-ins, with its own ``seeds`` list."""
    module = types.ModuleType("cupy")
    module.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    module.__file__ = __file__
    module.ndarray = ndarray
    for name in FUNCTIONS:
        setattr(module, name, _strict(getattr(np, name)))
    for name in CONSTANTS:
        setattr(module, name, getattr(np, name))
    module.asarray, module.array, module.asnumpy = asarray, array, asnumpy
    module.histogram, module.get_array_module = histogram, get_array_module
    module.linalg = types.SimpleNamespace(**{n: _strict(getattr(np.linalg, n)) for n in LINALG})
    # What the device was asked to do, in order: transforms, stream and device waits, plan
    # caches emptied (a test reads the order).
    module.events = []
    module.fft = _fft_namespace(module.events)
    module.seeds = []
    module.generator_states = GENERATOR_STATES
    module.random = types.SimpleNamespace(
        default_rng=lambda seed: Generator(seed, module.seeds, module.generator_states))
    module.cuda = types.SimpleNamespace(
        get_current_stream=lambda: _stream(module.events),
        Device=lambda *_: types.SimpleNamespace(
            synchronize=lambda: module.events.append(("sync",))))
    return module


def install(monkeypatch) -> types.ModuleType:
    """Register a fresh stand-in as ``cupy`` for one test; return it."""
    module = namespace()
    monkeypatch.setitem(sys.modules, "cupy", module)
    from daskgpu.toolkit import numeric

    monkeypatch.setattr(numeric, "CounterGenerator", _recording_device_generators(module.seeds))
    return module


def host_kernel(twin, device=(0,)):
    """A device kernel's stand-in: ``twin``, its CPU twin, on the memory of the stand-ins at
    the positional arguments ``device`` (all stand-ins, or all host data: then ``twin`` runs as
    it is), the other arguments as given (a stand-in where the kernel takes host data fails in
    the twin, as on a GPU). The twin writes in place where the kernel does; its array results
    come back as stand-ins (the argument itself where it returns an argument's memory), in
    device memory as the kernel leaves them. For the functions that launch Numba kernels,
    which cannot run on stand-ins: the code around them is what such a test checks."""

    def launch(*args, **kwargs):
        if not any(isinstance(args[at], ndarray) for at in device):
            return twin(*args, **kwargs)  # host data: the twin, as the kernel's dispatch does
        host = list(args)
        for at in device:
            if not isinstance(args[at], ndarray):
                raise TypeError(f"argument {at} of {launch.__name__}: a device array expected, "
                                f"got {type(args[at])}")
            host[at] = args[at]._values
        given = {id(args[at]._values): args[at] for at in device}

        def back(result):
            if isinstance(result, np.ndarray) and id(result) in given:
                return given[id(result)]
            if isinstance(result, tuple):
                return tuple(back(r) for r in result)
            return _wrapped(result)

        return back(twin(*host, **kwargs))

    launch.__name__ = getattr(twin, "__name__", "kernel")
    return launch


# --- cuDF ---------------------------------------------------------------------------------------

CUDF_IMPLICIT_CONVERSION = ("Implicit conversion to a host NumPy array via __array__ is not "
                            "allowed, To explicitly construct a host matrix, consider using "
                            ".to_numpy().")


class Series:
    """A cuDF column as code meets it: ``.values`` in device memory (a stand-in array), the
    host only through ``to_numpy``/``to_pandas``, no ``__array__``."""

    def __init__(self, series: pd.Series):
        self._series = series

    def __len__(self):
        return len(self._series)

    def __array__(self, *args, **kwargs):
        raise TypeError(CUDF_IMPLICIT_CONVERSION)

    dtype = property(lambda self: self._series.dtype)
    values = property(lambda self: ndarray(self._series.to_numpy(copy=True)))

    def to_numpy(self) -> np.ndarray:
        """The values copied to the host."""
        return self._series.to_numpy(copy=True)

    def to_pandas(self) -> pd.Series:
        """A pandas copy, on the host."""
        return self._series.copy()


class Index(Series):
    """A cuDF index: as a column, ``.values`` on the device."""


class DataFrame:
    """A cuDF frame as code meets it: columns and index are :class:`Series`/:class:`Index`, the
    host only through ``to_pandas``; ``assign`` takes device arrays."""

    def __init__(self, frame: pd.DataFrame):
        self._frame = frame

    def __len__(self):
        return len(self._frame)

    def __array__(self, *args, **kwargs):
        raise TypeError(CUDF_IMPLICIT_CONVERSION)

    columns = property(lambda self: self._frame.columns)
    index = property(lambda self: Index(self._frame.index.to_series()))

    def __getitem__(self, name):
        return Series(self._frame[name])

    def assign(self, **columns):
        """A new frame with ``columns`` (device arrays, scalars or :class:`Series`)."""
        host = {}
        for name, value in columns.items():
            if isinstance(value, np.ndarray):
                raise _refused(value)
            host[name] = (value.get() if isinstance(value, ndarray) else
                          value.to_pandas() if isinstance(value, Series) else value)
        return DataFrame(self._frame.assign(**host))

    def to_pandas(self) -> pd.DataFrame:
        """A pandas copy, on the host."""
        return self._frame.copy()


for _cls, _where in ((Series, "series"), (Index, "index"), (DataFrame, "dataframe")):
    _cls.__module__ = f"cudf.core.{_where}"
