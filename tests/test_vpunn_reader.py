"""The .vpunn reader: the shipped files, synthetic files built with flatbuffers, and every error path."""
from __future__ import annotations


import flatbuffers
import numpy as np
import pytest

from hw_cost import CostModelError
from hw_cost.vpunn import DmaModel, DpuModel, VpunnError, parse_model_name, read_vpunn
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from hw_cost.vpunn.reader import parse_vpunn
from conftest import vector_rows

MODELS = SHIPPED_MODEL_DIR


# -- a writer for synthetic files (the schema of docs/vpunn.md §1.1) --------------------------------------

def _vector(b, values, kind: str):
    prepend = {"i4": b.PrependInt32, "u4": b.PrependUint32, "off": b.PrependUOffsetTRelative}[kind]
    b.StartVector(4, len(values), 4)
    for v in reversed(values):
        prepend(v)
    return b.EndVector()


def _table(b, *slots) -> int:
    """A table whose fields are `slots` in order, each (kind, value): "off" an offset of something built before,
    "i1" / "u1" / "i4" / "u4" a scalar."""
    prepend = {"off": b.PrependUOffsetTRelativeSlot, "i1": b.PrependInt8Slot, "u1": b.PrependUint8Slot,
               "i4": b.PrependInt32Slot, "u4": b.PrependUint32Slot}
    b.StartObject(len(slots))
    for field, (kind, value) in enumerate(slots):
        prepend[kind](field, value, 0)
    return b.EndObject()


def build_vpunn(name: str, layers, *, tag: int = 1, identifier: bytes = b"VPUN", chain: bool = True,
                weight_type: int = 0) -> bytes:
    """A .vpunn file: layers are (weight (out, in), bias or None, activation code)."""
    b = flatbuffers.Builder(1024)
    tensors, buffers = [], [b""]  # (name, shape, buffer index); buffer 0 is the empty sentinel

    def tensor(tname, shape, data=None):
        if data is not None:
            buffers.append(np.asarray(data, dtype="<f4").tobytes())
        tensors.append((tname, shape, len(buffers) - 1 if data is not None else 0))
        return len(tensors) - 1

    current = tensor("input", [1, layers[0][0].shape[1]])
    ops = []
    for j, (w, bias, act) in enumerate(layers):
        n_out, n_in = w.shape
        wt = tensor(f"fc_{j}/kernel", [n_in, n_out], w)  # shape reads [in, out], data is row-major [out][in]
        ins = [current if chain else 0, wt] + ([tensor(f"fc_{j}/bias", [n_out], bias)] if bias is not None else [])
        out = tensor(f"fc_{j}/out", [1, n_out])
        ops.append((f"fc_{j}", ins, [out], act))
        current = out

    buf_offs = [_table(b, ("off", b.CreateByteVector(data))) for data in buffers]
    ten_offs = []
    for tname, shape, bidx in tensors:
        s, sh = b.CreateString(tname), _vector(b, shape, "u4")
        ten_offs.append(_table(b, ("off", s), ("off", sh), ("i1", weight_type if bidx else 0), ("u4", bidx)))
    op_offs = []
    for oname, ins, outs, act in ops:
        s, vi, vo = b.CreateString(oname), _vector(b, ins, "i4"), _vector(b, outs, "i4")
        impl = _table(b)
        op_offs.append(_table(b, ("off", s), ("off", vi), ("off", vo), ("u1", tag), ("off", impl), ("i4", act)))
    name_off = b.CreateString(name)
    vt, vops, vbuf = _vector(b, ten_offs, "off"), _vector(b, op_offs, "off"), _vector(b, buf_offs, "off")
    vin, vout = _vector(b, [0], "i4"), _vector(b, [current], "i4")
    model = _table(b, ("off", name_off), ("off", vt), ("off", vin), ("off", vout), ("off", vops), ("off", vbuf))
    b.Finish(model, file_identifier=identifier)
    return bytes(b.Output())


def _mlp(rng, sizes, bias=True, acts=None):
    acts = acts or [1] * (len(sizes) - 2) + [0]
    return [(rng.standard_normal((o, i)).astype(np.float32),
             rng.standard_normal(o).astype(np.float32) if bias else None, a)
            for i, o, a in zip(sizes[:-1], sizes[1:], acts)]


# -- synthetic files ------------------------------------------------------------------------------------------

def test_synthetic_network_round_trip_and_forward():
    rng = np.random.default_rng(0)
    layers = _mlp(rng, [12, 7, 5, 1], acts=[1, 2, 0])  # RELU, SIGMOID, NOOP
    net = parse_vpunn(build_vpunn("VPUNN-01-01 $nick$", layers))
    assert (net.name, net.input_version, net.output_version) == ("VPUNN-01-01 $nick$", 1, 1)
    assert [lay.activation for lay in net.layers] == ["RELU", "SIGMOID", "NOOP"]
    for lay, (w, bias, _) in zip(net.layers, layers):
        np.testing.assert_array_equal(lay.weight, w)
        np.testing.assert_array_equal(lay.bias, bias)
    x = rng.standard_normal((9, 12)).astype(np.float32)
    h = np.maximum(x @ layers[0][0].T + layers[0][1], 0)
    h = 1 / (1 + np.exp(-(h @ layers[1][0].T + layers[1][1])))
    expected = (h @ layers[2][0].T + layers[2][1])[:, 0]
    np.testing.assert_allclose(net.forward(x), expected, rtol=1e-5, atol=1e-6)
    assert net.forward(np.repeat(x, 3000, axis=0)).shape == (27000,)  # chunked path


def test_layers_without_bias():
    net = parse_vpunn(build_vpunn("VPUNN-10-02", _mlp(np.random.default_rng(1), [67, 4, 1], bias=False)))
    assert all(lay.bias is None for lay in net.layers)
    assert net.n_params == 67 * 4 + 4


@pytest.mark.parametrize("name, versions", [
    ("VPUNN-11-02", (11, 2)), ("VPUNN-10-02 $fast$", (10, 2)), ("VPUNN-01-01", (1, 1)), ("VPUNN", (1, 1)),
    ("VPUNN-4011", (4011, 1)), ("", (0, 0)), ("VPUNN-12x-3y", (12, 3)),
])
def test_parse_model_name(name, versions):
    assert parse_model_name(name) == versions


def test_parse_model_name_rejects_non_numbers():
    with pytest.raises(VpunnError, match="not a number"):
        parse_model_name("VPUNN-abc-02")


# -- error paths ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good_file() -> bytes:
    return build_vpunn("VPUNN-11-02", _mlp(np.random.default_rng(2), [93, 8, 1]))


@pytest.mark.parametrize("cut", [0, 3, 7, 40, 0.5, -4])
def test_truncated_file(good_file, cut):
    n = int(len(good_file) * cut) if isinstance(cut, float) else (cut if cut >= 0 else len(good_file) + cut)
    with pytest.raises(VpunnError, match="truncated|not a VPUNN model file"):
        parse_vpunn(good_file[:n], source="cut.vpunn")


def test_wrong_identifier(good_file):
    with pytest.raises(VpunnError, match=r"identifier b'XXXX', expected b'VPUN'"):
        parse_vpunn(good_file[:4] + b"XXXX" + good_file[8:])


def test_foreign_files(tmp_path):
    png = tmp_path / "image.vpunn"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    with pytest.raises(VpunnError, match="not a VPUNN model file"):
        read_vpunn(png)
    text = tmp_path / "notes.vpunn"
    text.write_text("just some text that is long enough to have an identifier")
    with pytest.raises(VpunnError, match="not a VPUNN model file"):
        read_vpunn(text)
    with pytest.raises(VpunnError, match="not found"):
        read_vpunn(tmp_path / "missing.vpunn")
    with pytest.raises(VpunnError, match="directory"):
        read_vpunn(tmp_path)


def test_garbage_offsets_give_clear_errors(good_file):
    rng = np.random.default_rng(3)
    refused = 0
    for _ in range(30):  # corrupt random bytes after the header: a VpunnError of one line, never another crash
        data = bytearray(good_file)
        for pos in rng.integers(8, len(data), 8):
            data[pos] = int(rng.integers(256))
        try:
            parse_vpunn(bytes(data))  # corrupted weights alone still make a readable file
        except VpunnError as exc:
            refused += 1
            assert str(exc) and "\n" not in str(exc) and "Traceback" not in str(exc)
    assert refused >= 5, refused  # most corruptions hit offsets and sizes, which the reader checks


def test_unimplemented_layer_type_and_non_chain():
    rng = np.random.default_rng(4)
    with pytest.raises(VpunnError, match="L2NormalizationLayer; only FullyConnectedLayer"):
        parse_vpunn(build_vpunn("VPUNN-11-02", _mlp(rng, [93, 1]), tag=2))
    with pytest.raises(VpunnError, match="only sequential networks"):
        parse_vpunn(build_vpunn("VPUNN-11-02", _mlp(rng, [93, 5, 1]), chain=False))
    with pytest.raises(VpunnError, match="has type FLOAT16; only FLOAT32 weights"):
        parse_vpunn(build_vpunn("VPUNN-11-02", _mlp(rng, [93, 1]), weight_type=1))


def test_unimplemented_interface_versions_are_named():
    rng = np.random.default_rng(5)
    with pytest.raises(VpunnError, match=r"interface 12 .*implemented: 10, 11, 4011, 5114"):
        DpuModel(parse_vpunn(build_vpunn("VPUNN-12-02", _mlp(rng, [93, 1]))))
    with pytest.raises(VpunnError, match=r"output interface 3 .*implemented: 2, 4, 5"):
        DpuModel(parse_vpunn(build_vpunn("VPUNN-11-03", _mlp(rng, [93, 1]))))
    with pytest.raises(VpunnError, match="takes 50 inputs but interface 11 has 93"):
        DpuModel(parse_vpunn(build_vpunn("VPUNN-11-02", _mlp(rng, [50, 1]))))
    with pytest.raises(VpunnError, match=r"DMA interface 11 with output 2 .*implemented: DMA interfaces 1, 2, 3 with"):
        DmaModel(parse_vpunn(build_vpunn("VPUNN-11-02", _mlp(rng, [93, 1]))))
    assert isinstance(VpunnError("x"), CostModelError)


# -- the shipped files ----------------------------------------------------------------------------------------

SHIPPED = {  # docs/vpunn.md §1.3: (name, in/out versions, layer sizes, biases, last activation, params)
    "vpu_2_0.vpunn": ("VPUNN-10-02", 10, 2, [67, 256, 256, 256, 256, 1], False, "NOOP", 214016),
    "vpu_2_0.fast.vpunn": ("VPUNN-10-02", 10, 2, [67, 64, 64, 64, 64, 1], False, "NOOP", 16640),
    "vpu_2_7.vpunn": ("VPUNN-11-02", 11, 2, [93, 93, 256, 256, 256, 256, 1], True, "RELU", 230439),
    "vpu_2_7.fast.vpunn": ("VPUNN-11-02", 11, 2, [93, 93, 64, 64, 64, 64, 1], True, "RELU", 27303),
    "dma_2_7.vpunn": ("VPUNN-01-01", 1, 1, [12, 12, 128, 128, 128, 1], True, "RELU", 34973),
}


@pytest.mark.parametrize("file", sorted(SHIPPED))
def test_shipped_files(file):
    name, vin, vout, sizes, bias, last_act, params = SHIPPED[file]
    net = read_vpunn(MODELS / file)
    assert (net.name, net.input_version, net.output_version) == (name, vin, vout)
    assert [lay.n_in for lay in net.layers] + [net.layers[-1].n_out] == sizes
    assert all((lay.bias is not None) == bias for lay in net.layers)
    assert [lay.activation for lay in net.layers[:-1]] == ["RELU"] * (len(sizes) - 2)
    assert net.layers[-1].activation == last_act
    assert net.n_params == params


@pytest.mark.parametrize("version, stem", [(10, "vpu_2_0"), (11, "vpu_2_7")])
def test_forward_matches_official_raw_outputs(version, stem):
    official = {r["id"]: r for r in vector_rows("vpunn_dpu.csv")}
    rows = vector_rows(f"vpunn_dpu_descriptors_v{version}.csv")
    x = np.array([[float(v) for k, v in r.items() if k != "id"] for r in rows], dtype=np.float32)
    for suffix, column in (("", "raw_nn_output"), (".fast", "raw_nn_output_fast")):
        got = read_vpunn(MODELS / f"{stem}{suffix}.vpunn").forward(x)
        ref = np.array([float(official[r["id"]][column]) for r in rows])
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-3)
