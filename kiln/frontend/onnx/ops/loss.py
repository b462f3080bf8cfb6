"""Training-loss ONNX ops used at inference: NegativeLogLikelihoodLoss,
SoftmaxCrossEntropyLoss."""
from __future__ import annotations
