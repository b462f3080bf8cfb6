"""DeviceModule: a compiled GPU function — kernels for a device plus the host's launch plans."""
from __future__ import annotations

from ..function_info import FunctionInfo
from ..timing import TimingResult
from .api import device_api
from .array import DeviceNDArray
from .plan import run_plan


class DeviceModule:
    """Kernels (one program: OpenCL C source or PTX) and, per function, its signature and the
    plan that launches its kernels. Calling it runs the entry function on the device its
    array arguments live on.

    Example:
        >>> mod = kiln.build(s, [A, B, C], target="opencl")   # doctest: +SKIP
        >>> mod(a, b, c)              # a, b, c: kiln.nd.array(..., device=kiln.opencl(0))
    """

    def __init__(self, device_type: str, functions: dict, program, sources: dict,
                 entry: str | None, type_key: str):
        self.device_type = device_type
        self._functions = {name: (info, plan) for name, (info, plan) in functions.items()}
        self.program = program
        self._sources = dict(sources)
        self.entry = entry
        self.type_key = type_key
        self._loaded: dict = {}               # Device -> (api, {kernel name: kernel})
        self.keepalive = None                 # what maps a loaded library's constants

    # ------------------------------------------------------------------ saving
    def to_dict(self) -> dict:
        """Everything the module is, as JSON-able data (an exported library carries it).

        Example:
            >>> DeviceModule.from_dict(mod.to_dict()).get_source() == mod.get_source()  # doctest: +SKIP
            True
        """
        return {"device_type": self.device_type, "type_key": self.type_key, "entry": self.entry,
                "program": self.program, "sources": self._sources,
                "functions": {name: {"info": info.to_dict(), "plan": plan}
                              for name, (info, plan) in self._functions.items()}}

    @staticmethod
    def from_dict(data: dict) -> "DeviceModule":
        try:
            functions = {name: (FunctionInfo.from_dict(f["info"]), f["plan"])
                         for name, f in data["functions"].items()}
            return DeviceModule(data["device_type"], functions, data["program"],
                                data["sources"], data.get("entry"), data["type_key"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"malformed GPU module description ({err!r})") from None

    # ------------------------------------------------------------------ functions
    def function_names(self) -> list[str]:
        return list(self._functions)

    def function_info(self, name: str) -> FunctionInfo:
        return self._require(name)[0]

    def _require(self, name):
        if name not in self._functions:
            raise KeyError(f"module has no function {name!r}; it has {', '.join(self._functions)}")
        return self._functions[name]

    def get_function(self, name: str):
        """Function `name`: call it with device arrays (and numbers for scalar parameters)."""
        info, plan = self._require(name)

        def call(*args):
            device, env = self._bind(info, args)
            api, kernels = self._load(device)

            def launch(kernel, grid, block, values):
                api.launch(kernels[kernel], grid, block, values)

            run_plan(plan, env, launch, api)

        call.__name__ = name
        return call

    __getitem__ = get_function

    def __call__(self, *args):
        if self.entry is None:
            raise RuntimeError("this module has no entry function; call one by name")
        return self.get_function(self.entry)(*args)

    def _load(self, device):
        loaded = self._loaded.get(device)
        if loaded is None:
            api = device_api(device)
            program = api.load_program(self.program)
            kernels = {}
            for _, plan in self._functions.values():
                for kname in _kernel_names(plan):
                    kernels[kname] = api.get_kernel(program, kname)
            loaded = self._loaded[device] = (api, kernels)
        return loaded

    def _bind(self, info: FunctionInfo, args):
        params = info.params
        if len(args) != len(params):
            raise TypeError(f"{info.name} takes {len(params)} arguments "
                            f"({', '.join(p.name for p in params)}), got {len(args)}")
        env, device, sizes = {}, None, {}
        for p, a in zip(params, args):
            if p.kind == "scalar":
                env[p.name] = a
                continue
            if not isinstance(a, DeviceNDArray):
                raise TypeError(f"{info.name}: argument {p.name!r} must be an array on a "
                                f"{self.device_type} device (kiln.nd.array(x, device=kiln."
                                f"{self.device_type}(0))), got {type(a).__name__}")
            if a.device.device_type != self.device_type:
                raise TypeError(f"{info.name}: argument {p.name!r} is on {a.device!r}; this "
                                f"module runs on {self.device_type} devices")
            if device is not None and a.device != device:
                raise TypeError(f"{info.name}: arguments are on {device!r} and {a.device!r}")
            device = a.device
            if a.dtype != p.dtype:
                raise TypeError(f"{info.name}: argument {p.name!r} has dtype {a.dtype}, "
                                f"expected {p.dtype}")
            if len(a.shape) != len(p.shape):
                raise ValueError(f"{info.name}: argument {p.name!r} has shape {a.shape}, "
                                 f"expected {len(p.shape)} dimensions {tuple(p.shape)}")
            for k, (want, got) in enumerate(zip(p.shape, a.shape)):
                if isinstance(want, str):
                    if sizes.setdefault(want, got) != got:
                        raise ValueError(f"{info.name}: size {want!r} is {sizes[want]} by an "
                                         f"earlier argument but {got} in {p.name!r} (dim {k})")
                elif want != got:
                    raise ValueError(f"{info.name}: argument {p.name!r} has shape {a.shape}, "
                                     f"expected {tuple(p.shape)}")
            env[p.name] = a.handle
        if device is None:
            raise TypeError(f"{info.name}: no array argument says which device to run on")
        for name, _ in info.shape_vars:
            env[name] = sizes[name]
        return device, env

    # ------------------------------------------------------------------ sources, timing
    def get_source(self, fmt: str = "") -> str:
        """The device source ("" or "cuda" / "cl"), or another format ("ptx")."""
        if fmt == "":
            return next(iter(self._sources.values()))
        if fmt not in self._sources:
            raise ValueError(f"module ({self.type_key}) has no source in format {fmt!r}; "
                             f"available: {', '.join(self._sources)}")
        return self._sources[fmt]

    def source_formats(self) -> list[str]:
        return list(self._sources)

    def time_evaluator(self, name: str, device=None, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0):
        """f(*args) -> TimingResult: seconds per call of function `name`, timed on the device
        by its events (OpenCL profiling events, CUDA events).

        Example:
            >>> mod.time_evaluator(mod.entry, number=20)(a, b, c).median   # doctest: +SKIP
        """
        func = self.get_function(name)

        def evaluate(*args) -> TimingResult:
            dev, _ = self._bind(self.function_info(name), args)
            api = device_api(dev)
            func(*args)                                  # load, warm up
            results, n = [], number
            for _ in range(repeat):
                while True:
                    seconds = api.time(lambda: func(*args), n)
                    if seconds * n * 1e3 >= min_repeat_ms:
                        break
                    n = max(n + 1, int(n * 1.6))
                results.append(seconds)
            return TimingResult(tuple(results))

        return evaluate

    def __repr__(self):
        return (f"<kiln.runtime.gpu.DeviceModule {self.type_key}: "
                f"{', '.join(self._functions)}; sources: {', '.join(self._sources)}>")


# Where each plan operation keeps its nested operations (kiln/codegen/gpu/split.py).
_NESTED = {"let": (3,), "for": (4,), "alloc": (4,), "if": (2, 3)}


def _kernel_names(plan) -> list:
    names = []
    for op in plan:
        if op[0] == "launch":
            names.append(op[1])
        for k in _NESTED.get(op[0], ()):
            names.extend(_kernel_names(op[k]))
    return names
