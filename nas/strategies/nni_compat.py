"""NNI 3.0 compatibility: a latency penalty with a gradient inside NNI's differentiable one-shot strategies.

NNI's DARTS, GumbelDARTS and Proxyless hand their `ExpectationProfilerPenalty` the architecture probabilities
as Python floats (`export_probs` calls `.cpu().tolist()`), so the penalty has no gradient and the architecture
weights come out the same for any penalty scale. The strategies here are NNI's, except that the one-shot
module's `export_probs` keeps the softmax tensors of every `LayerChoice` and `InputChoice`: the penalty (for
example a `FlopsProfiler` expectation) then back-propagates into their architecture weights.

    from nas.strategies.nni_compat import DARTS          # instead of nni.nas.strategy.DARTS
    strategy = DARTS(penalty={"profiler": profiler, "baseline": 1e6, "scale": 0.5})

Choices inside operations (`nni.choice` widths), `Repeat` depths and `Cell`s keep NNI's float probabilities
(no gradient): vpunas's own differentiable strategy (`search.strategy: differentiable`) covers those.
"""
from __future__ import annotations

import types

from nni.nas.oneshot.pytorch import strategy as _oneshot
from nni.nas.oneshot.pytorch.supermodule.differentiable import DifferentiableMixedInput, DifferentiableMixedLayer

__all__ = ["DARTS", "GumbelDARTS", "Proxyless", "export_probs_with_grad"]


def export_probs_with_grad(oneshot_module) -> dict:
    """label -> {value: probability}, tensors connected to the architecture weights for LayerChoice and
    InputChoice (Proxyless's mixed layers and inputs included); NNI's floats for every other choice."""
    result: dict = {}
    for module in oneshot_module.supernet_modules():
        if isinstance(module, (DifferentiableMixedLayer, DifferentiableMixedInput)):
            if module.label not in result:
                probs = module._softmax(module._arch_alpha)
                names = module.names if isinstance(module, DifferentiableMixedLayer) else range(len(probs))
                result[module.label] = dict(zip(names, probs))
        else:
            result.update(module.export_probs(memo=result))
    return result


def _with_grad_probs(oneshot_module):
    oneshot_module.export_probs = types.MethodType(export_probs_with_grad, oneshot_module)
    return oneshot_module


class DARTS(_oneshot.DARTS):
    __doc__ = "NNI's DARTS whose latency / FLOPs penalty has a gradient (see `nas.strategies.nni_compat`)."

    def configure_oneshot_module(self, training_module):
        return _with_grad_probs(super().configure_oneshot_module(training_module))


class GumbelDARTS(_oneshot.GumbelDARTS):
    __doc__ = "NNI's GumbelDARTS whose latency / FLOPs penalty has a gradient (see `nas.strategies.nni_compat`)."

    def configure_oneshot_module(self, training_module):
        return _with_grad_probs(super().configure_oneshot_module(training_module))


class Proxyless(_oneshot.Proxyless):
    __doc__ = "NNI's Proxyless whose latency / FLOPs penalty has a gradient (see `nas.strategies.nni_compat`)."

    def configure_oneshot_module(self, training_module):
        return _with_grad_probs(super().configure_oneshot_module(training_module))
