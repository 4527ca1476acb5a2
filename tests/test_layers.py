import pytest
import torch.nn as nn
import torchvision

from hw_cost import LayerExtractionError, LayerSpec, extract_layers


def test_mobilenet_v2_layers_macs_and_fusion():
    layers = extract_layers(torchvision.models.mobilenet_v2(), (1, 3, 224, 224))
    ops = [l.op for l in layers]
    assert ops.count("dwconv") == 17 and ops.count("add") == 10 and ops.count("linear") == 1
    assert ops.count("global_avgpool") == 1
    assert "batchnorm" not in ops and "act" not in ops  # folded / fused
    assert sum(l.macs for l in layers) == 300_774_272  # the published 300M MACs
    first = layers[0]
    assert first.op == "conv" and first.in_shape == (1, 3, 224, 224) and first.out_shape == (1, 32, 112, 112)
    assert first.stride == (2, 2) and first.padding == (1, 1, 1, 1) and first.activation == "relu6"


def test_resnet50_add_relu_fused_and_maxpool():
    layers = extract_layers(torchvision.models.resnet50(), (1, 3, 224, 224), dtype="fp16")
    adds = [l for l in layers if l.op == "add"]
    assert len(adds) == 16 and all(a.activation == "relu" for a in adds)
    pool = next(l for l in layers if l.op == "maxpool")
    assert pool.kernel == (3, 3) and pool.stride == (2, 2) and pool.out_shape == (1, 64, 56, 56)
    assert all(l.dtype == "fp16" for l in layers)
    assert round(sum(l.macs for l in layers) / 1e9, 2) == 4.09


def test_non_dpu_ops_are_kept_not_dropped():
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.PixelShuffle(2), nn.Sigmoid())
    layers = extract_layers(model, (1, 3, 8, 8))
    assert [l.op for l in layers] == ["conv", "pixel_shuffle", "act"]
    assert layers[1].out_shape == (1, 4, 16, 16) and layers[2].activation == "sigmoid"


def test_same_padding_inferred_from_shapes():
    conv = nn.Conv2d(8, 8, 3, stride=2, padding="valid")
    layers = extract_layers(conv, (1, 8, 9, 9))
    assert layers[0].padding == (0, 0, 0, 0) and layers[0].out_shape == (1, 8, 4, 4)


def test_untraceable_model_is_a_clear_error():
    class Dynamic(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x  # data-dependent control flow

    with pytest.raises(LayerExtractionError, match="not traceable"):
        extract_layers(Dynamic(), (1, 3, 4, 4))


def test_layer_spec_validates_op_and_activation():
    with pytest.raises(ValueError, match="unknown layer op"):
        LayerSpec("deconv", (1, 1, 1, 1), (1, 1, 1, 1))
    with pytest.raises(ValueError, match="unknown activation"):
        LayerSpec("conv", (1, 1, 1, 1), (1, 1, 1, 1), activation="swish2")
    spec = LayerSpec("conv", (1, 16, 8, 8), (1, 32, 8, 8), kernel=(3, 3), padding=(1, 1, 1, 1))
    assert spec.macs == 32 * 64 * 16 * 9 and spec.params == 32 * 16 * 9 + 32
    assert spec.signature() != LayerSpec("conv", (1, 16, 8, 8), (1, 32, 8, 8)).signature()


class _Scale(nn.Module):
    """Squeeze-excite's final product or a bias add, with the broadcast operand on either side."""

    def __init__(self, op: str, broadcast_first: bool):
        super().__init__()
        self.op, self.broadcast_first = op, broadcast_first
        self.conv = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        s = y.mean((2, 3), keepdim=True)
        a, b = (s, y) if self.broadcast_first else (y, s)
        return a * b if self.op == "mul" else a + b


@pytest.mark.parametrize("op", ["mul", "add"])
def test_elementwise_layers_do_not_depend_on_operand_order(op):
    from hw_cost import load_cost_model

    orders = [extract_layers(_Scale(op, first), (1, 16, 14, 14)) for first in (False, True)]
    eltwise = [[l for l in layers if l.op == op] for layers in orders]
    assert [len(e) for e in eltwise] == [1, 1]
    assert eltwise[0][0].in_shape == eltwise[1][0].in_shape == (1, 16, 14, 14)  # the broadcast (output) shape
    vpunn = load_cost_model("vpunn:VPU_2_7")
    costs = [vpunn.model_latency_ms(_Scale(op, first), (1, 16, 14, 14)) for first in (False, True)]
    assert costs[0] == pytest.approx(costs[1], rel=1e-12)
