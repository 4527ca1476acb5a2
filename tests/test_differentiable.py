"""The differentiable strategy: relaxed supernets, expected latency and its gradient, the latency loss steering the
derived arch, resume, and a whole run through the CLI."""
import json
import logging
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import CONFIGS, REPO, SCORE_ON_200, TRAIN_ON_512
from hw_cost import load_cost_model
from nas.cli import main
from nas.config import ConfigError, load_config
from nas.randomness import RunRandom
from nas.strategies.differentiable import (RELAXATIONS, ArchParameters, DifferentiableStrategy, DifferentiableTrainer,
                                           ExpectedLatency, build_relaxed, latency_loss, relaxed_families)
from nas.rundir import RunDir, read_csv
from nas.context import build_task_and_space
from nas.search_context import SearchContext
from search_spaces import build_space

SMOKE = str(CONFIGS / "fmnist_mobilenet_smoke.yaml")
LUT = f"lut:{CONFIGS / 'luts' / 'fmnist_mobilenet_openvino_cpu.json'}"
VPUNN = "vpunn:VPU_2_7"
#: family -> (config whose space section is used, space overrides, input shape, outputs, batch shape, cost sources)
FAMILIES = {
    "mobilenet": (SMOKE, [], (1, 28, 28), 10, (4, 1, 28, 28), [LUT, VPUNN]),
    "resnet": (str(CONFIGS / "fmnist_resnet_smoke.yaml"), [], (1, 28, 28), 10, (4, 1, 28, 28), [VPUNN]),
    "edsr": (str(CONFIGS / "sr_edsr_x2_smoke.yaml"), ["space.global_skips=[none, bicubic]",
                                                     "space.upsamplers=[subpixel, edsr]",
                                                     "space.block_types=[plain, res]"], (3, 16, 24), 3,
             (2, 3, 12, 12), [VPUNN]),
    # no dropout: the relaxed head draws its dropout mask over the largest head width (other draws, the same
    # distribution), so train mode matches the supernet's outputs only without it
    "hybrid": (str(CONFIGS / "fmnist_npu_smoke.yaml"), ["space.dropout=0"], (1, 28, 28), 10, (4, 1, 28, 28), [VPUNN]),
}
COSTED = [(family, spec) for family, entry in FAMILIES.items() for spec in entry[-1]]
#: choices that change no cost block (EDSR's residual scaling is folded into a conv's weights)
COST_FREE = {"res_scale"}
#: a tiny, fast version of the smoke run for the strategy's own tests
TINY = [*TRAIN_ON_512, *SCORE_ON_200]


def dnas_config(*overrides, **search_keys):
    """The smoke config with the differentiable strategy; `search_keys` go into the search section."""
    settings = {"warmup_epochs": 0, "finetune_epochs": 0, **search_keys}
    return load_config(SMOKE, ["search.strategy=differentiable", f"search.differentiable={json.dumps(settings)}",
                               *overrides])


@pytest.fixture(scope="module")
def spaces():
    out = {}
    for family, (config, overrides, shape, outputs, *_) in FAMILIES.items():
        out[family] = build_space(load_config(config, overrides).space, input_shape=shape, num_outputs=outputs)
        assert out[family].family == family
    return out


@pytest.fixture(scope="module")
def cost_models():
    return {spec: load_cost_model(spec) for spec in (LUT, VPUNN)}


@pytest.fixture(scope="module")
def latencies(spaces, cost_models):
    """(family, cost source) -> ExpectedLatency, built once."""
    cache = {}

    def get(family, spec):
        if (family, spec) not in cache:
            space = spaces[family]
            cache[family, spec] = ExpectedLatency(space, build_relaxed(space).cost_terms(), cost_models[spec])
        return cache[family, spec]

    return get


def kind(label: str) -> str:
    return label.rsplit(".", 1)[-1]


def test_every_family_has_a_relaxation_and_one_without_is_refused_in_one_line(spaces):
    from nas.errors import ConfigError
    from search_spaces import SPACES

    assert set(SPACES) == set(FAMILIES) == set(relaxed_families())  # and every family is in the tests here
    unrelaxed = type("UnrelaxedSpace", (type(spaces["mobilenet"]),), {"family": "unrelaxed", "relaxed_class": None})
    space = unrelaxed(spaces["mobilenet"].config, input_shape=(1, 28, 28), num_outputs=10)
    with pytest.raises(ConfigError, match="no relaxation for space 'unrelaxed'; valid: edsr, hybrid, mobilenet, "
                                          "resnet$"):
        build_relaxed(space)


@pytest.mark.parametrize("family, spec", COSTED)
def test_expected_latency_of_one_arch_is_its_cost_model_latency(spaces, cost_models, latencies, family, spec):
    space, model, latency = spaces[family], cost_models[spec], latencies(family, spec)
    arch_params = ArchParameters(space.choices)
    rng = np.random.default_rng(0)
    for arch in [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(6)]:
        expected = float(latency(arch_params.one_hot(space.assignment_from_arch(arch))))
        assert expected == pytest.approx(model.latency_ms(space.blocks(arch)), rel=1e-9)
    uniform = float(latency(arch_params.probs()).detach())
    sampled = np.mean([model.latency_ms(space.blocks(space.sample(rng))) for _ in range(600)])
    assert uniform == pytest.approx(sampled, rel=0.03)  # the exact expectation of uniformly sampled archs


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("family", FAMILIES)
def test_one_hot_gates_run_exactly_the_supernet_arch(spaces, family, mode):
    space = spaces[family]
    torch.manual_seed(0)
    relaxed = build_relaxed(space)
    getattr(relaxed.supernet, mode)()
    arch_params = ArchParameters(space.choices)
    x = torch.randn(*FAMILIES[family][4])
    rng = np.random.default_rng(1)
    for arch in [space.largest(), space.smallest(), space.sample(rng), space.sample(rng)]:
        torch.manual_seed(1)  # the same dropout mask in train mode
        out = relaxed(x, arch_params.one_hot(space.assignment_from_arch(arch)))
        relaxed.supernet.set_active(arch)
        torch.manual_seed(1)
        torch.testing.assert_close(out, relaxed.supernet(x), rtol=1e-5, atol=1e-5)


def test_one_hot_gates_run_every_hybrid_block_type_exactly(spaces):
    """Each block type at every position that searches it, at the largest and the smallest widths: the types
    whose paths share a beginning (ConvNext-like and ExtraDW at stride 1) and those that stride elsewhere."""
    space = spaces["hybrid"]
    torch.manual_seed(0)
    relaxed = build_relaxed(space).train()
    arch_params = ArchParameters(space.choices)
    x = torch.randn(*FAMILIES["hybrid"][4])
    for kind in ("convnext", "ib", "extradw", "fused"):
        for base in (space.largest(), space.smallest()):
            block = [[kind if kind in types else own for own in stage]
                     for stage, types in zip(base["block"], space.stage_types)]
            arch = space.validate(dict(base, block=block))
            out = relaxed(x, arch_params.one_hot(space.assignment_from_arch(arch)))
            relaxed.supernet.set_active(arch)
            torch.testing.assert_close(out, relaxed.supernet(x), rtol=1e-5, atol=1e-5)


def test_one_hot_gates_run_a_ratio_1_block_exactly():
    """A stage that also searches ratio 1 (no expand conv): its gate lets the block's input through."""
    space = build_space(load_config(SMOKE, ["space.stages.0.expand_ratios=[1, 3, 6]"]).space,
                        input_shape=(1, 28, 28), num_outputs=10)
    torch.manual_seed(0)
    relaxed = build_relaxed(space).eval()
    arch_params = ArchParameters(space.choices)
    x = torch.randn(4, 1, 28, 28)
    rng = np.random.default_rng(2)
    archs = [space.smallest()] + [space.sample(rng) for _ in range(4)]
    assert any(1 in arch["expand"][0] for arch in archs) and any(6 in arch["expand"][0] for arch in archs)
    for arch in archs:
        out = relaxed(x, arch_params.one_hot(space.assignment_from_arch(arch)))
        relaxed.supernet.set_active(arch)
        torch.testing.assert_close(out, relaxed.supernet(x), rtol=1e-5, atol=1e-5)


#: the smoke space with MobileNetV3's settings: squeeze-excite (also on ratio 1), relu early, hardswish late
SE_OVERRIDES = ["space.activation=hardswish", "space.stages.0.expand_ratios=[1, 3, 6]", "space.stages.0.se=true",
                "space.stages.0.activation=relu", "space.stages.2.se=true"]


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_one_hot_gates_run_a_squeeze_excite_space_exactly(mode):
    """SE blocks under gates: the reduce width follows the expansion gate, as the supernet slices it."""
    space = build_space(load_config(SMOKE, SE_OVERRIDES).space, input_shape=(1, 28, 28), num_outputs=10)
    torch.manual_seed(0)
    relaxed = build_relaxed(space)
    getattr(relaxed.supernet, mode)()
    arch_params = ArchParameters(space.choices)
    x = torch.randn(4, 1, 28, 28)
    rng = np.random.default_rng(3)
    archs = [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(4)]
    assert len({e for arch in archs for e in arch["expand"][2]}) == 3  # every ratio of an SE stage is run
    for arch in archs:
        torch.manual_seed(1)  # the same dropout mask in train mode
        out = relaxed(x, arch_params.one_hot(space.assignment_from_arch(arch)))
        relaxed.supernet.set_active(arch)
        torch.manual_seed(1)
        expected = relaxed.supernet(x)
        # relative to the outputs' scale: fresh batch-norm statistics leave eval-mode outputs near 1e-6
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5 * float(expected.detach().abs().max()))


def test_expected_latency_of_a_squeeze_excite_space_is_its_cost_model_latency(cost_models):
    space = build_space(load_config(SMOKE, SE_OVERRIDES).space, input_shape=(1, 28, 28), num_outputs=10)
    model = cost_models[VPUNN]
    latency = ExpectedLatency(space, build_relaxed(space).cost_terms(), model)
    arch_params = ArchParameters(space.choices)
    rng = np.random.default_rng(0)
    for arch in [space.largest(), space.smallest()] + [space.sample(rng) for _ in range(3)]:
        expected = float(latency(arch_params.one_hot(space.assignment_from_arch(arch))))
        assert expected == pytest.approx(model.latency_ms(space.blocks(arch)), rel=1e-9)


@pytest.mark.parametrize("relaxation", RELAXATIONS)
@pytest.mark.parametrize("family, spec", COSTED)
def test_every_arch_parameter_gets_a_latency_gradient(spaces, latencies, family, spec, relaxation):
    space = spaces[family]
    torch.manual_seed(0)
    relaxed = build_relaxed(space)
    arch_params = ArchParameters(space.choices)
    with torch.no_grad():  # away from the uniform start, where every gradient is symmetric
        for logit in arch_params.logits:
            logit.normal_(0, 0.5)
    gates = arch_params.gates(relaxation, tau=1.0, generator=torch.Generator().manual_seed(0))
    task_loss = relaxed(torch.randn(*FAMILIES[family][4]), gates).square().mean()
    expected = latencies(family, spec)(arch_params.probs())
    labels = [c.label for c in arch_params.searched]
    reference = float(expected.detach())
    for form in ({"loss": "additive", "latency_lambda": 1.0},
                 {"loss": "multiplicative", "target_ms": reference / 2, "beta": 1.0}):
        term = latency_loss(task_loss.detach(), expected, dnas_config(**form).search.settings(), reference,
                            form.get("target_ms"))
        grads = torch.autograd.grad(term, list(arch_params.logits), retain_graph=True, allow_unused=True)
        zero = {label for label, g in zip(labels, grads) if g is None or not torch.all(g.abs() > 0)}
        assert {kind(label) for label in zero} <= COST_FREE, f"{form['loss']}: no latency gradient for {zero}"
        assert {kind(label) for label in labels} - COST_FREE  # the latency gradient reaches some kind
    # the task loss reaches every kind of choice through the gates too (depth included)
    grads = torch.autograd.grad(task_loss, list(arch_params.logits))
    reached = {kind(label) for label, g in zip(labels, grads) if g.abs().sum() > 0}
    # a hard sample of a plain body runs no residual block: its residual scaling gets no gradient then
    unsampled = {"res_scale"} if family == "edsr" and gates["block"][space.block_types.index("res")] == 0 else set()
    assert reached == {kind(label) for label in labels} - unsampled


@pytest.fixture(scope="module")
def tiny_run():
    """Task, space and cost model of the tiny smoke run (built once: the strategy settings do not change them)."""
    config = dnas_config(*TINY)
    task, space = build_task_and_space(config)
    return task, space, load_cost_model(config.cost.model)


def derived_latency(tiny_run, **search_keys) -> float:
    """Latency of the arch derived after three search epochs of the tiny smoke run."""
    task, space, cost_model = tiny_run
    config = dnas_config(*TINY, "train.epochs=3", arch_lr=0.1, arch_tau_end=0.1, **search_keys)
    search = DifferentiableTrainer(space, task, cost_model, config.train, config.search.settings(),
                                   RunRandom(config.seed))
    search.run(progress=False)
    assert [e["epoch"] for e in search.trajectory] == [1, 2, 3]
    return cost_model.latency_ms(space.blocks(search.derived))


def test_raising_lambda_lowers_the_derived_latency(tiny_run):
    """The additive loss on the smoke config: three lambdas, strictly decreasing latency of the derived arch."""
    latency = [derived_latency(tiny_run, loss="additive", latency_lambda=lam) for lam in (0.0, 0.2, 2.0)]
    assert latency[0] > latency[1] > latency[2], latency


@pytest.mark.slow
def test_lowering_the_target_lowers_the_derived_latency(tiny_run):
    """The multiplicative loss with a two-sided target: the derived arch follows the target."""
    targets = (0.9, 0.7, 0.55)
    latency = [derived_latency(tiny_run, loss="multiplicative", target_ms=t, beta=1.0, beta_below=1.0)
               for t in targets]
    assert latency[0] > latency[1] > latency[2], latency
    assert all(abs(lat / t - 1) < 0.2 for lat, t in zip(latency, targets)), latency


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("relaxation", RELAXATIONS)
def test_interrupted_search_resumes_bit_for_bit(tmp_path, relaxation):
    config = dnas_config("task.train_size=128", "task.batch_size=16", "train.epochs=2", "train.checkpoint_every=3",
                         relaxation=relaxation, warmup_epochs=1, finetune_epochs=1, loss="multiplicative",
                         target_ms=0.7, beta_below=1.0)
    task, space = build_task_and_space(config)
    cost_model = load_cost_model(config.cost.model)

    def search(path, stop_at=None):
        s = DifferentiableTrainer(space, task, cost_model, config.train, config.search.settings(),
                                  RunRandom(config.seed), path)

        def stop(step):
            if step == stop_at:
                raise Interrupted

        s.run(progress=False, on_step=stop)
        return s

    whole = search(tmp_path / "whole.pt")
    assert whole.total_steps == 16 and len(whole.trajectory) == 1
    for stop_at in (5, 13):  # mid-search (after a checkpoint at step 3) and mid-fine-tuning
        with pytest.raises(Interrupted):
            search(tmp_path / "killed.pt", stop_at)
    resumed = search(tmp_path / "killed.pt")
    assert resumed.trajectory == whole.trajectory
    for name, tensor in whole.state_dict()["model"].items():
        assert torch.equal(tensor, resumed.state_dict()["model"][name]), name
    for a, b in zip(whole.arch.logits, resumed.arch.logits):
        assert torch.equal(a, b)


@pytest.mark.parametrize("overrides, message", [
    ({"loss": "multiplicative"}, "search.differentiable.target_ms: the multiplicative loss needs a latency target"),
    ({"relaxation": "darts"}, "search.differentiable.relaxation: 'darts' is not one of gumbel, proxyless"),
    ({"arch_fraction": 1.0}, r"search.differentiable.arch_fraction: must be in \(0, 1\)"),
    ({"target_ms": 0.3, "target_vs_smallest": 1.2}, "target_ms: give the latency target in ms or as "
                                                     "target_vs_smallest, not both"),
    ({"target_vs_smallest": 0.9}, r"search.differentiable.target_vs_smallest: must be >= 1"),
])
def test_bad_search_settings_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        dnas_config(**overrides)


def test_warmup_longer_than_training_is_an_error(tmp_path, capsys):
    overrides = ["search.strategy=differentiable", "search.differentiable.warmup_epochs=1", "train.epochs=1", "--out",
                 str(tmp_path / "r")]
    assert main(["search", SMOKE, *overrides, "--no-progress"]) == 2
    assert "search.differentiable.warmup_epochs (1) must be below train.epochs (1)" in capsys.readouterr().err


def test_differentiable_run_end_to_end(tmp_path, smoke_run, caplog):
    """A whole run: one candidates.csv row per search epoch with its expected latency; resume changes nothing;
    scripts/bench_dnas.py measures what it hands over beside the evolution's finalised archs."""
    caplog.set_level(logging.INFO)  # the run's log as the CLI writes it (pytest's handlers keep the root at WARNING)
    out = tmp_path / "run"
    args = ["search", SMOKE, "search.strategy=differentiable",
            "search.differentiable={warmup_epochs: 1, finetune_epochs: 1, loss: multiplicative, "
            "target_vs_smallest: 1.5}",
            "train.epochs=3", "search.finalize.int8=false", *TINY, "--out", str(out), "--no-progress"]
    assert main(args) == 0
    run = RunDir(out)
    rows = read_csv(run.candidates)
    assert list(rows[0]) == ["id", "generation", "arch", "top1", "test_top1", "latency_ms", "cost_model", "params",
                             "macs", "is_pareto", "final_top1", "final_test_top1", "final_int8_test_top1",
                             "final_epochs", "is_final_pareto", "expected_latency_ms"]
    assert [int(r["generation"]) for r in rows] == [1, 2] and [int(r["id"]) for r in rows] == [0, 1]
    for row in rows:
        assert float(row["expected_latency_ms"]) > 0 and float(row["top1"]) > 20  # 10 classes: chance is 10%
    assert json.loads(rows[-1]["arch"]) == torch.load(run.supernet_checkpoint, weights_only=True)["trajectory"][-1][
        "arch"]
    derived = rows[-1]["arch"]  # it alone is finalised (an earlier epoch's row shows it too when it is that arch)
    assert all((r["final_top1"] != "") == (r["arch"] == derived) for r in rows)
    assert "Pareto front" in run.report_html.read_text()
    # the derived arch measured end to end here against the target, and kept for the report's measured column
    log = run.log.read_text()
    target = re.search(r"latency target ([0-9.]+) ms on lut:\S+: 1.5 x the smallest arch's ([0-9.]+) ms", log)
    assert target and float(target[1]) == pytest.approx(1.5 * float(target[2]), rel=1e-3)
    assert re.search(rf"latency target {target[1]} ms: arch {rows[-1]['id']} measured [0-9.]+ ms end to end "
                     r"on this machine \([+-][0-9.]+%, (within|outside) \+-10%", log)
    assert (run.checkpoint_dir / "measured.jsonl").exists()
    assert not run.strategy_state.exists()  # the strategy's state is the search's, checkpointed in supernet.pt
    before = run.candidates.read_text()
    assert main(args[:-3] + ["--out", str(out), "--resume", "--no-progress"]) == 0
    assert run.candidates.read_text() == before

    bench = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_dnas.py"), "--run", str(out), "--against",
                            str(smoke_run.path)], check=True, capture_output=True, text=True, cwd=REPO).stdout
    lines = bench.splitlines()
    assert lines[0].startswith(f"arch {rows[-1]['id']}: test top1 {float(rows[-1]['final_test_top1']):.2f}, table ")
    assert "ms, measured here " in lines[0] and lines[1].startswith(f"  {smoke_run.path}: ")
    assert "dominated by" in lines[1] and len(lines) == 2


def test_the_strategy_state_is_the_search_state(tiny_run, tmp_path):
    """`DifferentiableStrategy.state_dict` / `load_state_dict` are its `DifferentiableTrainer`'s."""
    task, space, cost_model = tiny_run
    config = dnas_config(*TINY)

    def strategy(folder: str) -> DifferentiableStrategy:
        return DifferentiableStrategy(SearchContext(config, RunDir(tmp_path / folder), task, space, cost_model,
                                                    progress=False))

    first = strategy("a")
    with torch.no_grad():
        for p in first.trainer.arch.parameters():
            p.add_(torch.randn_like(p))
    state = first.state_dict()
    assert set(state) == set(first.trainer.state_dict()) and state["global_step"] == 0
    second = strategy("b")
    second.load_state_dict(dict(state, global_step=7))
    assert second.trainer.global_step == 7
    for name, logits in first.trainer.arch.state_dict().items():
        assert torch.equal(logits, second.trainer.arch.state_dict()[name]), name


def test_differentiable_search_of_the_hybrid_space_end_to_end(tmp_path):
    """configs/fmnist_npu_dnas_smoke.yaml through `vpunas search`: the relaxed hybrid supernet searched under a
    latency target, one candidates.csv row per search epoch, the derived arch finalised and drawn in the report."""
    run = RunDir(tmp_path / "run")
    assert main(["search", str(CONFIGS / "fmnist_npu_dnas_smoke.yaml"), "--out", str(run.path), "--no-progress"]) == 0
    rows = read_csv(run.candidates)
    assert [int(r["generation"]) for r in rows] == [1, 2]
    assert all(float(r["expected_latency_ms"]) > 0 and r["cost_model"] == "vpunn:VPU_2_7" for r in rows)
    trajectory = torch.load(run.supernet_checkpoint, weights_only=True)["trajectory"]
    assert [json.loads(r["arch"]) for r in rows] == [entry["arch"] for entry in trajectory]
    derived = rows[-1]  # it alone is finalised (an earlier epoch's row shows it too when it is that arch)
    assert all((r["final_top1"] != "") == (r["arch"] == derived["arch"]) for r in rows)
    assert float(derived["final_top1"]) > 20  # it learned (10 classes: chance is 10%)
    page = run.report_html.read_text()
    assert "Pareto front" in page and '<svg class="arch"' in page


def test_the_hybrid_dnas_config_searches_the_hybrid_configs_space():
    """configs/fmnist_npu_dnas.yaml holds a copy of fmnist_npu.yaml's space (its other sections start from the
    default config's: fmnist_npu.yaml's sandwich settings would be refused)."""
    config = load_config(CONFIGS / "fmnist_npu_dnas.yaml")
    assert config.search.strategy == "differentiable"
    assert config.space == load_config(CONFIGS / "fmnist_npu.yaml").space
