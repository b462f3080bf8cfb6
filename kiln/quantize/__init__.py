"""Post-training quantization in kiln: a float model calibrated into an int8 one.

    result = kiln.quantize.quantize(mod, params, calibration_batches, observer="entropy")
    print(result.report)                      # per-layer error against float32
    lib = kiln.compile(result.mod, params=result.params)

The quantized module is in QDQ form (quantize / dequantize pairs around float ops, as ONNX
QDQ models are); kiln.compile folds those into integer kernels. See docs/quantize.md.
"""
from .calibrate import (LayerError, QuantizeReport, QuantizeResult, default_weight_bits,
                        quantize)
from .observers import Entropy, MinMax, Percentile, make_observer

__all__ = ["Entropy", "LayerError", "MinMax", "Percentile", "QuantizeReport", "QuantizeResult",
           "default_weight_bits", "make_observer", "quantize"]
