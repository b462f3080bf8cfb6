"""ViT (kiln.testing.vit, the timm layout with a fused qkv projection) from PyTorch: a small
version of ViT-B/16 with an odd token count (5x5 patches + the class token = 26 rows in every
dense and attention product), imported, compiled and compared with torch.

Bound: float32 max abs error <= 1e-4 x max|output| (conftest TOL).
"""
from kiln.testing.models import example_input
from kiln.testing.vit import vit_b_16


def test_small_vit_matches_torch(verify):
    model = vit_b_16(seed=1, image_size=80, hidden=64, layers=2, heads=4, num_classes=10)
    (x,) = example_input(model, image_size=80, seed=2)
    mod, params, errs = verify(model, (x,))
    assert mod["main"].ret_type.shape == (1, 10)
