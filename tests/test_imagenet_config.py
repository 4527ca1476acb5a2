"""The ImageNet config: its MobileNetV3 space at 224x224 costed whole by VPUNN, and its smoke version run end to
end on a small ImageFolder of random images."""
import json

import numpy as np

from conftest import CONFIGS
from hw_cost import extract_layers, load_cost_model
from nas.cli import main
from nas.config import load_config
from nas.rundir import RunDir, read_csv
from search_spaces import build_space

IMAGENET = CONFIGS / "imagenet_mobilenet.yaml"
SMOKE = CONFIGS / "imagenet_mobilenet_smoke.yaml"
CLASSES = ("bird", "car", "dog")


def make_image_folder(root, per_class: dict[str, int], size: int = 40) -> None:
    """root/<split>/<class>/<i>.png: random RGB images, `per_class[split]` of each class."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in per_class.items():
        for c, name in enumerate(CLASSES):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                pixels[..., c] //= 2  # a faint colour cue per class
                Image.fromarray(pixels).save(folder / f"{i}.png")


def test_imagenet_space_at_224_is_mobilenetv3_and_vpunn_costs_all_of_it():
    config = load_config(IMAGENET)
    assert config.task.dataset == "image_folder" and config.task.image_size == 224
    assert config.cost.model == "vpunn:VPU_2_7"
    space = build_space(config.space, input_shape=(3, 224, 224), num_outputs=1000)
    assert space.stage_activations == ["relu", "relu", "hardswish", "hardswish", "hardswish"]
    assert [s.se for s in config.space.stages] == [False, True, False, True, True]
    model = load_cost_model(config.cost.model)
    blocks = space.all_blocks()
    model.check_covers(blocks)
    latency = model.block_latencies_ms(blocks)
    assert len(blocks) > 50 and np.all(np.isfinite(latency)) and np.all(latency > 0)
    small, large = (model.latency_ms(space.blocks(getattr(space, a)())) for a in ("smallest", "largest"))
    assert 0 < small < large
    keys = [b.key for b in space.blocks(space.largest())]
    assert keys[1].endswith("|s1|relu") and keys[2].endswith("|s2|relu") and "|se" not in keys[2]
    assert keys[-2].endswith("|hardswish|se240")  # a 160-channel block at ratio 6: SE reduce to 960 / 4
    # the smallest arch's subnet: 1000 outputs, and MobileNetV3-like layers (squeeze-excite: pool, 1x1s, mul)
    subnet = space.build_supernet().extract(space.smallest())
    layers = extract_layers(subnet, (1, 3, 224, 224))
    ops = {layer.op for layer in layers}
    assert {"global_avgpool", "mul"} <= ops and layers[-1].out_shape == (1, 1000, 1, 1)
    assert {layer.activation for layer in layers} >= {"relu", "hardswish", "hardsigmoid"}
    baselines = {b.name for b in config.baselines}
    assert {"largest", "smallest"} <= baselines


def test_smoke_config_searches_a_small_image_folder(tmp_path):
    data, out = tmp_path / "data", tmp_path / "run"
    make_image_folder(data, {"train": 40, "val": 8})
    assert main(["search", str(SMOKE), f"task.root={data}", "--out", str(out), "--no-progress"]) == 0
    run = RunDir(out)
    rows = read_csv(run.candidates)
    assert len(rows) >= 4 and len({r["arch"] for r in rows}) == len(rows)
    assert all(0 <= float(r["top1"]) <= 100 and float(r["latency_ms"]) > 0 for r in rows)
    assert {r["cost_model"] for r in rows} == {"vpunn:VPU_2_7"}
    assert all(int(r["macs"]) > 0 and int(r["params"]) > 0 for r in rows)
    final = [r for r in rows if r["final_top1"] != ""]
    assert len(final) == 2 and all(0 <= float(r["final_test_top1"]) <= 100 for r in final)
    archs = [json.loads(r["arch"]) for r in rows]
    assert all(len(a["depth"]) == 5 for a in archs)
    assert [b["name"] for b in read_csv(run.baselines)] == ["largest", "smallest"]
    page = run.report_html.read_text()
    assert "Pareto front" in page and "largest" in page
    assert f"root: {data}" in run.config.read_text()

