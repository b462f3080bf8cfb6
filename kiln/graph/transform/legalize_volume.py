"""The "legalize" rules of the 3-d ops (kiln/graph/ops/volume.py): each becomes 2-d ops whose
blocked kernels kiln schedules well. LegalizeQnn applies every op's "legalize" rule, these
included, first in the pipeline.

    conv3d(x, w)[n, o, z]  = Σ_t conv2d(frames_t, w[:, :, t])[n·Do + z, o]
        frames_t = the input frames z·sd + t·dd (depth-padded), batched as N·Do images
    max_pool3d(x)          = a pool along D of the 2-d pool of every frame (H·W flattened)
    avg_pool3d(x)          = the same with averages: a box's sum and its element count (with or
                             without padding) are products of per-axis terms

A kernel depth of kd costs kd 2-d convolutions, whose sums FuseOps adds in each one's
epilogue; the frames are moved once (NCDHW -> NDCHW) and back.

Example:
    >>> y = legalize_qnn(Function([x], call("nn.conv3d", x, w)))   # doctest: +SKIP
"""
from __future__ import annotations

from ..op import call, register_op_attr
from ..ops.relations import padding6, triple

KEY = "legalize"


def _shape(e) -> tuple:
    return tuple(e.checked_type.shape)


@register_op_attr("nn.conv3d", KEY)
def _conv3d(c):
    x, w = c.args
    a = c.attrs
    sd, sh, sw = triple(a.strides, "strides")
    dd, dh, dw = triple(a.dilation, "dilation")
    front, top, left, back, bottom, right = padding6(a.padding)
    _, o, do, ho, wo = _shape(c)
    n, ch, _, h, wd = _shape(x)
    kd = _shape(w)[2]
    frames = call("transpose", x, axes=(0, 2, 1, 3, 4))             # N, D, C, H, W
    if front or back:
        frames = call("nn.pad", frames, pad_width=((0, 0), (front, back), (0, 0), (0, 0),
                                                   (0, 0)))
    total = None
    for t in range(kd):
        start = t * dd
        taps = call("strided_slice", frames, begin=(start,), end=(start + sd * (do - 1) + 1,),
                    strides=(sd,), axes=(1,))
        images = call("reshape", taps, newshape=(n * do, ch, h, wd))
        kernel = call("squeeze", call("strided_slice", w, begin=(t,), end=(t + 1,), axes=(2,)),
                      axis=(2,))
        y = call("nn.conv2d", images, kernel, strides=(sh, sw), padding=(top, left, bottom, right),
                 dilation=(dh, dw), groups=a.groups, out_dtype=a.out_dtype)
        total = y if total is None else call("add", total, y)
    out = call("reshape", total, newshape=(n, do, o, ho, wo))
    return call("transpose", out, axes=(0, 2, 1, 3, 4))


def _pool3d(kind: str):
    def rule(c):
        x = c.args[0]
        a = c.attrs
        kd, kh, kw = triple(a.pool_size, "pool_size")
        sd, sh, sw = triple(a.strides, "strides")
        dd, dh, dw = triple(a.dilation, "dilation")
        front, top, left, back, bottom, right = padding6(a.padding)
        n, ch, d, h, wd = _shape(x)
        _, _, do, ho, wo = _shape(c)
        extra = {"count_include_pad": a.count_include_pad} if kind == "avg" else {}
        frames = call(f"nn.{kind}_pool2d", call("reshape", x, newshape=(n, ch * d, h, wd)),
                      pool_size=(kh, kw), strides=(sh, sw), padding=(top, left, bottom, right),
                      dilation=(dh, dw), ceil_mode=a.ceil_mode, **extra)
        depth = call(f"nn.{kind}_pool2d", call("reshape", frames, newshape=(n, ch, d, ho * wo)),
                     pool_size=(kd, 1), strides=(sd, 1), padding=(front, 0, back, 0),
                     dilation=(dd, 1), ceil_mode=a.ceil_mode, **extra)
        return call("reshape", depth, newshape=(n, ch, do, ho, wo))
    rule.__name__ = f"_{kind}_pool3d"
    return rule


register_op_attr("nn.max_pool3d", KEY)(_pool3d("max"))
register_op_attr("nn.avg_pool3d", KEY)(_pool3d("avg"))
