"""The model zoo users bring (issue 32): torchvision, timm and Hugging Face transformers
architectures with seeded random weights (nothing is downloaded), each with its example inputs.

torchvision's wheels on the package registry are CUDA builds whose compiled ops cannot load
beside the CPU build of torch these machines use, and transformers gives up on every model once
it finds such a torchvision installed. So `make` installs torchvision and timm into a folder of
their own (ZOO_PATH, `<venv>/zoo`), which `import_zoo_packages` puts on the path after
defining torchvision's operator schemas (their kernels are never called: the zoo's models do not
use detection ops at inference). A user's own torchvision is not touched.

Each entry's `build()` returns (model in eval mode, example inputs); models whose forward returns
a structure are wrapped to return one tensor (logits, or the last hidden state), which is what
kiln's outputs are compared with.

Example:
    >>> from kiln.testing import zoo
    >>> [e.name for e in zoo.entries()][:2]                       # doctest: +SKIP
    ['torchvision/alexnet', 'torchvision/vgg11_bn']
    >>> model, inputs = zoo.entry("torchvision/resnet18").build()  # doctest: +SKIP
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

__all__ = ["ZOO_PATH", "ZooUnavailable", "Entry", "entries", "entry", "import_zoo_packages"]

ZOO_PATH = os.environ.get("KILN_ZOO_PATH", os.path.join(sys.prefix, "zoo"))
INSTALL_HINT = ("run `make zoo` in kiln's checkout (it installs torchvision and timm into "
                ".venv/zoo), or set KILN_ZOO_PATH to a folder that holds them")

# torchvision's operator schemas (torchvision/csrc/ops/*.cpp): its Python modules register
# fake kernels for them at import, which needs the operators to exist.
TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, "
    "float spatial_scale, SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
    "SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, "
    "float spatial_scale, SymInt pooled_height, SymInt pooled_width, SymInt batch_size, "
    "SymInt channels, SymInt height, SymInt width) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
    "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
    "SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, "
    "Tensor mask, Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, "
    "SymInt dilation_h, SymInt dilation_w, SymInt groups, SymInt offset_groups, "
    "bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
)
_SCHEMA_LIBRARY = []        # the torch.library.Library that holds them (kept alive)


class ZooUnavailable(RuntimeError):
    """A zoo source (torchvision, timm or transformers) cannot be imported here."""


def import_zoo_packages():
    """Import torchvision and timm: a torchvision installed where Python finds it already
    as it is, else ZOO_PATH's, with torchvision's operator schemas defined first (only for
    that one: a working torchvision defines them itself, and a second definition fails).

    Example:
        >>> torchvision, timm = import_zoo_packages()     # doctest: +SKIP
    """
    import importlib.util

    import torch
    if os.path.isdir(ZOO_PATH) and ZOO_PATH not in sys.path:
        sys.path.append(ZOO_PATH)
    spec = importlib.util.find_spec("torchvision")
    ours = spec is not None and spec.origin is not None and \
        os.path.abspath(spec.origin).startswith(os.path.abspath(ZOO_PATH) + os.sep)
    if ours and not _SCHEMA_LIBRARY and not hasattr(torch.ops.torchvision, "nms"):
        lib = torch.library.Library("torchvision", "DEF")
        for schema in TORCHVISION_SCHEMAS:
            lib.define(schema)
        _SCHEMA_LIBRARY.append(lib)
    try:
        import timm
        import torchvision
    except ImportError as exc:
        raise ZooUnavailable(f"torchvision / timm are not importable ({exc}); {INSTALL_HINT}") \
            from exc
    return torchvision, timm


@dataclass(frozen=True)
class Entry:
    """One zoo architecture: `name` is "<source>/<model>", `task` its kind (classification,
    segmentation, video, detection-backbone, encoder, decoder, encoder-decoder, speech,
    vision)."""
    name: str
    task: str
    make: Callable

    @property
    def source(self) -> str:
        return self.name.split("/", 1)[0]

    def build(self, seed: int = 0) -> tuple:
        """(model in eval mode, example inputs): weights drawn from `seed`, batch-norm
        statistics randomized (fresh ones are identities, which would hide a wrong
        normalization); the inputs are the same for every seed."""
        import torch

        from .models import randomize_norm_stats
        torch.manual_seed(seed)
        model, inputs = self.make()
        randomize_norm_stats(model, seed)
        return model.eval(), inputs


def _first_tensor(model, key: str | None = None, names: tuple = ()):
    """A module returning the first tensor of `model`'s output (logits / last_hidden_state of
    a transformers output, the `key` entry of a dict); positional inputs are passed as the
    keyword arguments `names` when given (an encoder-decoder's second input is not its
    second parameter)."""
    import torch
    from torch import nn

    class FirstTensor(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args))) if names else self.model(*args)
            if key is not None:
                return out[key]
            if isinstance(out, torch.Tensor):
                return out
            if isinstance(out, dict):
                return next(v for v in out.values() if isinstance(v, torch.Tensor))
            return out[0]
    return FirstTensor()


def _image(size: int = 224, frames: int = 0):
    import torch
    gen = torch.Generator().manual_seed(5)
    shape = (1, 3, frames, size, size) if frames else (1, 3, size, size)
    return (torch.randn(*shape, generator=gen),)


def _tokens(vocab: int, length: int = 128):
    import torch
    gen = torch.Generator().manual_seed(5)
    return torch.randint(0, vocab, (1, length), generator=gen)


# ---------------------------------------------------------------------------------------------
# torchvision

_TV_CLASSIFICATION = (
    "alexnet", "vgg11_bn", "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2",
    "squeezenet1_1", "densenet121", "googlenet", "inception_v3", "mobilenet_v2",
    "mobilenet_v3_small", "mobilenet_v3_large", "shufflenet_v2_x1_0", "mnasnet1_0",
    "efficientnet_b0", "efficientnet_v2_s", "regnet_x_400mf", "regnet_y_400mf", "convnext_tiny",
    "vit_b_16", "swin_t", "swin_v2_t", "maxvit_t")
_TV_SEGMENTATION = ("fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large")
_TV_VIDEO = {"r3d_18": 112, "mc3_18": 112, "r2plus1d_18": 112, "s3d": 224}


def _torchvision(name: str, task: str):
    def make():
        torchvision, _ = import_zoo_packages()
        models = torchvision.models
        if task == "segmentation":
            model = models.get_model(name, weights=None, weights_backbone=None, aux_loss=False)
            return _first_tensor(model, "out"), _image(224)
        if task == "video":
            return models.get_model(name, weights=None), _image(_TV_VIDEO[name], frames=16)
        kwargs = {"aux_logits": False, "init_weights": True} if name in (
            "googlenet", "inception_v3") else {}
        size = 299 if name == "inception_v3" else 224
        return models.get_model(name, weights=None, **kwargs), _image(size)
    return Entry(f"torchvision/{name}", task, make)


def _fpn_backbone(name: str):
    def make():
        import torch
        import_zoo_packages()
        from torchvision.models.detection.backbone_utils import (mobilenet_backbone,
                                                                  resnet_fpn_backbone)
        # plain batch norms: the default FrozenBatchNorm2d is no _BatchNorm, so its
        # statistics would stay identities
        norm = torch.nn.BatchNorm2d
        if name == "resnet50_fpn":
            body = resnet_fpn_backbone(backbone_name="resnet50", weights=None,
                                       trainable_layers=5, norm_layer=norm)
        else:
            body = mobilenet_backbone(backbone_name="mobilenet_v3_large", weights=None, fpn=True,
                                      trainable_layers=6, norm_layer=norm)
        return _first_tensor(body), _image(320)
    return Entry(f"torchvision/{name}", "detection-backbone", make)


# ---------------------------------------------------------------------------------------------
# timm (models built by name from its registry, pretrained=False)

_TIMM = {
    "resnet50d": "classification", "efficientnet_b0": "classification",
    "mobilenetv3_large_100": "classification", "ghostnet_100": "classification",
    "regnety_002": "classification", "rexnet_100": "classification",
    "mixnet_s": "classification", "dla34": "classification", "cspdarknet53": "classification",
    "repvgg_a0": "classification", "convnextv2_atto": "classification",
    "deit_tiny_patch16_224": "vision", "levit_128s": "vision", "poolformer_s12": "vision",
    "mobilevitv2_050": "vision", "efficientformer_l1": "vision", "edgenext_xx_small": "vision",
}


def _timm(name: str, task: str):
    def make():
        _, timm = import_zoo_packages()
        return timm.create_model(name, pretrained=False), _image(224)
    return Entry(f"timm/{name}", task, make)


# ---------------------------------------------------------------------------------------------
# transformers (random init from configs: the base sizes, decoders shrunk to ~100M parameters)

def _hf(name: str, task: str, config: Callable, inputs: Callable):
    def make():
        try:
            import transformers
        except ImportError as exc:
            raise ZooUnavailable(f"transformers is not importable ({exc})") from exc
        cfg = config(transformers)
        model = transformers.AutoModel.from_config(cfg, attn_implementation="eager")
        return _first_tensor(model, names=_INPUT_NAMES.get(inputs, ())), inputs(cfg)
    return Entry(f"transformers/{name}", task, make)


def _text(cfg, length: int = 128):
    return (_tokens(cfg.vocab_size, length),)


def _seq2seq(cfg, length: int = 64, target: int = 16):
    return (_tokens(cfg.vocab_size, length), _tokens(cfg.vocab_size, target))


def _audio_features(cfg):
    import torch
    gen = torch.Generator().manual_seed(5)
    return (torch.randn(1, cfg.num_mel_bins, 3000, generator=gen),
            _tokens(cfg.vocab_size, 8))


_INPUT_NAMES = {_seq2seq: ("input_ids", "decoder_input_ids"),
                _audio_features: ("input_features", "decoder_input_ids")}


def _waveform(cfg):
    import torch
    gen = torch.Generator().manual_seed(5)
    return (torch.randn(1, 16000, generator=gen),)


def _pixels(cfg):
    size = getattr(cfg, "image_size", 224)        # some configs hold a pair, or none
    return _image(size if isinstance(size, int) else 224)


_DECODER = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=6,
                num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                max_position_embeddings=512)

_HF = (
    ("bert", "encoder", lambda t: t.BertConfig(), _text),
    ("roberta", "encoder", lambda t: t.RobertaConfig(vocab_size=50265,
                                                     max_position_embeddings=514), _text),
    ("distilbert", "encoder", lambda t: t.DistilBertConfig(), _text),
    ("albert", "encoder", lambda t: t.AlbertConfig(hidden_size=768, num_attention_heads=12,
                                                   intermediate_size=3072), _text),
    ("electra", "encoder", lambda t: t.ElectraConfig(), _text),
    ("deberta_v2", "encoder", lambda t: t.DebertaV2Config(hidden_size=768, num_hidden_layers=12,
                                                          num_attention_heads=12,
                                                          intermediate_size=3072), _text),
    ("mobilebert", "encoder", lambda t: t.MobileBertConfig(), _text),
    ("gpt2", "decoder", lambda t: t.GPT2Config(), _text),
    ("llama", "decoder", lambda t: t.LlamaConfig(**_DECODER), _text),
    ("mistral", "decoder", lambda t: t.MistralConfig(**_DECODER), _text),
    ("qwen2", "decoder", lambda t: t.Qwen2Config(**_DECODER), _text),
    ("opt", "decoder", lambda t: t.OPTConfig(hidden_size=768, ffn_dim=3072, num_hidden_layers=6,
                                             num_attention_heads=12), _text),
    ("t5", "encoder-decoder", lambda t: t.T5Config(), _seq2seq),
    ("bart", "encoder-decoder", lambda t: t.BartConfig(), _seq2seq),
    ("whisper", "speech", lambda t: t.WhisperConfig(), _audio_features),
    ("wav2vec2", "speech", lambda t: t.Wav2Vec2Config(), _waveform),
    ("vit", "vision", lambda t: t.ViTConfig(), _pixels),
    ("deit", "vision", lambda t: t.DeiTConfig(), _pixels),
    ("swin", "vision", lambda t: t.SwinConfig(), _pixels),
    ("convnext", "vision", lambda t: t.ConvNextConfig(), _pixels),
    ("clip_vision", "vision", lambda t: t.CLIPVisionConfig(), _pixels),
    ("dinov2", "vision", lambda t: t.Dinov2Config(), _pixels),
    ("segformer", "vision", lambda t: t.SegformerConfig(), _pixels),
)


def entries() -> list:
    """Every zoo architecture, in a fixed order: torchvision, timm, transformers.

    Example:
        >>> len(entries()) >= 60                                  # doctest: +SKIP
        True
    """
    out = [_torchvision(n, "classification") for n in _TV_CLASSIFICATION]
    out += [_torchvision(n, "segmentation") for n in _TV_SEGMENTATION]
    out += [_torchvision(n, "video") for n in _TV_VIDEO]
    out += [_fpn_backbone(n) for n in ("resnet50_fpn", "mobilenet_v3_large_fpn")]
    out += [_timm(n, task) for n, task in _TIMM.items()]
    out += [_hf(n, task, config, inputs) for n, task, config, inputs in _HF]
    return out


def entry(name: str) -> Entry:
    """The zoo entry called `name` ("<source>/<model>").

    Example:
        >>> entry("transformers/bert").task                       # doctest: +SKIP
        'encoder'
    """
    for e in entries():
        if e.name == name:
            return e
    raise KeyError(f"no zoo entry {name!r}; entries: {', '.join(e.name for e in entries())}")
