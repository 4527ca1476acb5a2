"""vpunas spaces driven by NNI 3.0 strategies, with a vpunas cost model as the objective."""
import logging

import nni
import pytest
import torch
from nni.nas.evaluator import FunctionalEvaluator
from nni.nas.experiment import NasExperiment
from nni.nas.experiment.config import SequentialEngineConfig
from nni.nas.strategy import RegularizedEvolution

from conftest import CONFIGS, small_mobilenet_space
from hw_cost import load_cost_model
from search_spaces import arch_key
from search_spaces.nni_space import NniModelSpace


def test_frozen_samples_are_subnets_with_inherited_weights():
    space = small_mobilenet_space()
    supernet = space.build_supernet().eval()
    model_space = NniModelSpace(space, supernet)
    assert sorted(model_space.simplify()) == sorted(c.label for c in space.choices)
    sample = {c.label: c.values[-1] for c in space.choices}
    frozen = model_space.freeze(sample).eval()
    assert frozen.arch == space.largest()
    x = torch.randn(2, 1, 28, 28)
    supernet.set_active(space.largest())
    torch.testing.assert_close(frozen(x), supernet(x))
    assert sum(p.numel() for p in frozen.parameters()) == sum(p.numel() for p in supernet.parameters())


def test_nni_regularized_evolution_minimises_lut_latency(tmp_path):
    logging.getLogger("nni").setLevel(logging.ERROR)
    from nas.config import load_config
    from nas.context import build_task_and_space

    config = load_config(CONFIGS / "fmnist_mobilenet_smoke.yaml")
    _, space = build_task_and_space(config)
    cost = load_cost_model(config.cost.model)
    seen = {}

    def evaluate(model):
        latency = cost.latency_ms(space.blocks(model.arch))
        seen[arch_key(model.arch)] = latency
        nni.report_final_result(-latency)

    experiment = NasExperiment(NniModelSpace(space), FunctionalEvaluator(evaluate),
                               RegularizedEvolution(population_size=6, sample_size=3, seed=0))
    experiment.config.max_trial_number = 20
    experiment.config.execution_engine = SequentialEngineConfig()
    experiment.config.experiment_working_directory = str(tmp_path)
    experiment.run(port=8081, wait_completion=True, debug=False)
    (best,) = experiment.export_top_models(top_k=1, formatter="dict")
    best_arch = space.arch_from_assignment(best)
    assert len(seen) >= 10
    assert seen[arch_key(best_arch)] == pytest.approx(min(seen.values()))
