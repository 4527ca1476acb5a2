"""Deployable models of a run's archs: `models.py` exports TorchScript, ONNX or OpenVINO IR, each checked
against PyTorch; `quantize.py` quantizes a network to INT8 with NNCF and scores it (also used by finalisation).
"""
