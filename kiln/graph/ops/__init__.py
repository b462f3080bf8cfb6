"""Operator definitions, one module per area; importing this package registers them all.

`define` holds the registration forms (unary, binary, injective, reduction) and the glue that
looks up kiln.topi computes and schedules; docs/add_operator.md says how to add one.
"""
from . import conv_layout, elemwise, image, layout, nn, pooling, reduction, transform  # noqa: F401
from . import cumulative, indexing, quantize, signal, vision  # noqa: F401
from . import volume  # noqa: F401  (3-d convolution and pooling, legalized into 2-d ops)
from . import annotation  # noqa: F401  (compiler regions of "bring your own codegen")
from . import winograd  # noqa: F401,E402  (Winograd conv in the blocked layout)
from . import bitserial  # noqa: F401,E402  (1-8 bit operators: popcounts of bit planes)
