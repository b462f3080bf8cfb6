"""The model zoo (kiln.testing.zoo, issue 32): its list, its page, and a sample of its models
compiled and compared with eager PyTorch (the whole zoo is bench/zoo.py's run)."""
import os
import re

import numpy as np
import pytest

from kiln.testing import zoo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "model_zoo.md")

# Small members of each source, compiled in make test: a CNN with squeeze-excitation and
# hard-swish (torchvision), a timm RegNetY, and two transformers families.
SAMPLE = ("torchvision/mobilenet_v3_small", "timm/regnety_002", "transformers/distilbert",
          "transformers/gpt2")


def test_zoo_spans_sixty_architectures_of_three_sources():
    names = [e.name for e in zoo.entries()]
    assert len(names) == len(set(names)) >= 60
    assert {e.source for e in zoo.entries()} == {"torchvision", "timm", "transformers"}
    tasks = {e.task for e in zoo.entries()}
    assert {"classification", "segmentation", "video", "encoder", "decoder", "encoder-decoder",
            "speech", "vision"} <= tasks


def test_page_lists_exactly_the_zoo():
    """docs/model_zoo.md is bench/zoo.py's output: a zoo entry added or dropped since the last
    run makes it stale."""
    with open(PAGE) as fh:
        rows = [line for line in fh if line.startswith("| ") and not line.startswith("| model")]
    listed = [row.split("|")[1].strip() for row in rows]
    assert listed == [e.name for e in zoo.entries()]
    statuses = {row.split("|")[3].strip() for row in rows}
    assert statuses <= {"ok", "mismatch", "error"}


def test_unknown_entry_names_the_choices():
    with pytest.raises(KeyError, match="torchvision/resnet18"):
        zoo.entry("torchvision/resnet19")


def _zoo_packages():
    try:
        zoo.import_zoo_packages()
    except zoo.ZooUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("name", SAMPLE)
def test_zoo_sample_compiles_and_matches_eager(name):
    import torch

    import kiln
    from kiln.frontend import from_pytorch
    if name.split("/")[0] in ("torchvision", "timm"):
        _zoo_packages()
    model, inputs = zoo.entry(name).build()
    with torch.inference_mode():
        ref = model(*inputs).numpy()
    mod, params = from_pytorch(model, inputs)
    lib = kiln.compile(mod, target="llvm", params=params)
    ex = kiln.runtime.GraphExecutor(lib)
    for i, x in enumerate(inputs):
        ex.set_input(i, x.numpy())
    ex.run()
    out = ex.get_output(0).numpy()
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4 * np.abs(ref).max())


def test_torchvision_imports_beside_cpu_torch_and_transformers_still_works():
    _zoo_packages()
    import torchvision
    import transformers
    assert re.match(r"\d+\.\d+", torchvision.__version__)
    model = transformers.BertModel(transformers.BertConfig(num_hidden_layers=1, hidden_size=32,
                                                           num_attention_heads=2,
                                                           intermediate_size=64))
    assert model.config.hidden_size == 32
