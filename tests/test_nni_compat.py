"""nas.strategies.nni_compat: NNI's one-shot strategies with a cost penalty that reaches the architecture weights."""
import logging

import nni
import nni.nas.strategy as nni_strategy
import pytest
import torch
import torch.nn as nn
from nni.nas.evaluator.pytorch import Classification, DataLoader
from nni.nas.experiment import NasExperiment
from nni.nas.nn.pytorch import LayerChoice, ModelSpace
from nni.nas.profiler.pytorch.flops import FlopsProfiler

from nas.strategies import nni_compat

KERNELS = (1, 3, 5)


class ToySpace(ModelSpace):
    """One searched conv: 1x1, 3x3 or 5x5 (FLOPs grow with the kernel)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.op = LayerChoice([nn.Conv2d(8, 8, k, padding=k // 2) for k in KERNELS], label="op")
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.relu(self.op(torch.relu(self.stem(x)))).mean((2, 3)))


def arch_weights(strategy_class, scale: float) -> torch.Tensor:
    """The architecture logits of `op` after two epochs on a toy task, FLOPs penalty at `scale`."""
    logging.getLogger("nni").setLevel(logging.ERROR)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data = nni.trace(torch.utils.data.TensorDataset)(torch.randn(64, 1, 8, 8, generator=gen),
                                                     torch.randint(0, 4, (64,), generator=gen))
    space = ToySpace()
    evaluator = Classification(train_dataloaders=DataLoader(data, batch_size=16),
                               val_dataloaders=DataLoader(data, batch_size=16), max_epochs=2, num_classes=4,
                               enable_progress_bar=False, enable_model_summary=False, logger=False,
                               enable_checkpointing=False)
    penalty = {"profiler": FlopsProfiler(space, torch.randn(1, 1, 8, 8)), "baseline": 5000.0, "scale": scale}
    strategy = strategy_class(penalty=penalty, arc_learning_rate=0.05)
    NasExperiment(space, evaluator, strategy).run()
    return strategy._arch_parameters["op"].detach().clone()


def test_nni_own_darts_ignores_the_penalty():
    """The defect this module fixes (NNI 3.0 on torch 2.14): the same arch weights for penalty scale 0 and 100."""
    assert torch.equal(arch_weights(nni_strategy.DARTS, 0.0), arch_weights(nni_strategy.DARTS, 100.0))


@pytest.mark.parametrize("name", ["DARTS", "GumbelDARTS", "Proxyless"])
def test_penalty_steers_the_arch_weights(name):
    strategy_class = getattr(nni_compat, name)
    free, penalised = arch_weights(strategy_class, 0.0), arch_weights(strategy_class, 100.0)
    assert not torch.allclose(free, penalised, atol=1e-3)
    assert int(torch.argmax(penalised)) == KERNELS.index(1)  # the penalty favours the cheapest op
    assert int(torch.argmax(free)) != KERNELS.index(1)
