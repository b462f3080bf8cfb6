"""What the template tests share: running a built conv candidate on seeded random operands,
a small torch model imported into kiln with its reference output, and the tiny conv + dense
model the model-tuning tests tune (a 12x12 image: a 6x6x16 conv output)."""
import numpy as np
import torch

import kiln
from kiln.frontend import from_pytorch


class TinyConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, 2, 1)
        self.fc = torch.nn.Linear(16 * 6 * 6, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def run_conv(args, sched, tensors, rng):
    """Build (sched, [data, kernel, out]) and call it on uniform(-1, 1) operands of the task
    args' data and kernel shapes; returns (x, w, out) as numpy arrays."""
    data_shape, kernel_shape = args[0], args[1]
    f = kiln.build(sched, tensors, target="llvm")
    x = rng.uniform(-1, 1, data_shape).astype("float32")
    w = rng.uniform(-1, 1, kernel_shape).astype("float32")
    out = np.zeros([int(d) for d in tensors[2].shape], "float32")
    f(x, w, out)
    return x, w, out


def imported_model(make_model, input_shape):
    """(mod, params, x, reference output) of make_model() (built after seeding torch with 0) on a
    seeded random input of input_shape."""
    torch.manual_seed(0)
    model = make_model().eval()
    x = torch.randn(*input_shape)
    mod, params = from_pytorch(model, (x,))
    with torch.no_grad():
        ref = model(x).numpy()
    return mod, params, x.numpy(), ref
