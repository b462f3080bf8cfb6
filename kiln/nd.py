"""kiln.nd: array constructors, as in TVM (`kiln.nd.array(np_array)`, `kiln.nd.empty(...)`)."""
from .runtime import NDArray, array, empty, from_dlpack

__all__ = ["NDArray", "array", "empty", "from_dlpack"]
