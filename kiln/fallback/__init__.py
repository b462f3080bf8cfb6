"""Other runtimes running the parts of a model that kiln cannot compile (external targets of the
graph partitioner): `onnxruntime` for ONNX nodes kiln lacks. The PyTorch fallback of
torch.compile lives with the backend (kiln.torch.partition).
"""
