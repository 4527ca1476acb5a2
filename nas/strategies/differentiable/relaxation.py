"""Architecture parameters over a space's choices, their relaxations, and the differentiable expected latency.

A family's supernet runs under gates through the interface the family implements (`search_spaces.relaxed`:
its space's `relaxed_class`); `build_relaxed` builds it.

Every searched `Choice` of a space gets a logit vector; its probabilities are `softmax(logits)`. A forward pass
of the relaxed supernet takes one *gate* vector per choice, drawn in one of two ways:

* `gumbel` (FBNet: Wu et al., CVPR 2019, https://arxiv.org/abs/1812.03443): a Gumbel-softmax sample at
  temperature tau, a soft mixture whose gradient reaches every option.
* `proxyless` (ProxylessNAS: Cai et al., ICLR 2019, https://arxiv.org/abs/1812.00332): one option sampled from
  the probabilities, used as a binary gate in the forward pass; the backward pass takes the gradient with
  respect to the gate as the gradient with respect to the probability (straight-through), which is
  ProxylessNAS's binary-gate estimate dL/d logit_i = sum_j dL/dg_j p_j (delta_ij - p_i).

The expected latency is exact under the independent categorical distributions: for each cost term (a block
position, say) a table holds the cost-model latency of every joint value of the choices it depends on, and
E[latency] = fixed + sum over terms of the table contracted with those choices' probabilities. It is
differentiable in every logit that changes some cost, depth included (a block that a depth choice skips costs 0).
"""
from __future__ import annotations

import itertools
import logging
import string
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from hw_cost import Block, CostModel
from search_spaces import SPACES, Choice, SearchSpace, Supernet
from search_spaces.relaxed import CostTerm, RelaxedSupernet

from ...errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = ["RELAXATIONS", "ArchParameters", "ExpectedLatency", "relaxed_families", "build_relaxed"]

RELAXATIONS = ("gumbel", "proxyless")


class ArchParameters(nn.Module):
    """One logit vector per searched choice of a space (uniform at the start).

    Choices with a single value get no parameter (their gate is the constant 1).

    Args:
        choices: the space's choices, in order.
    """

    def __init__(self, choices: list[Choice]):
        super().__init__()
        self.choices = list(choices)
        self.searched = [c for c in self.choices if len(c.values) > 1]
        self.logits = nn.ParameterList([nn.Parameter(torch.zeros(len(c.values))) for c in self.searched])

    def probs(self, sharpness: float = 1.0) -> dict[str, torch.Tensor]:
        """label -> probabilities softmax(sharpness * logits) (differentiable)."""
        out = {c.label: torch.ones(1) for c in self.choices if len(c.values) == 1}
        out.update({c.label: F.softmax(a * sharpness, dim=0) for c, a in zip(self.searched, self.logits)})
        return out

    def gates(self, relaxation: str, tau: float, generator: torch.Generator,
              sharpness: float = 1.0) -> dict[str, torch.Tensor]:
        """label -> gate vector for one forward pass, sampled from `probs(sharpness)` (see the module docstring)."""
        if relaxation not in RELAXATIONS:
            raise ValueError(f"relaxation: {relaxation!r} is not one of {', '.join(RELAXATIONS)}")
        out = {c.label: torch.ones(1) for c in self.choices if len(c.values) == 1}
        for c, a in zip(self.searched, self.logits):
            a = a * sharpness
            if relaxation == "gumbel":
                u = torch.rand(a.shape, generator=generator).clamp_(1e-10, 1.0 - 1e-7)
                out[c.label] = F.softmax((a - torch.log(-torch.log(u))) / tau, dim=0)
            else:
                p = F.softmax(a, dim=0)
                hard = F.one_hot(torch.multinomial(p.detach(), 1, generator=generator)[0], len(p)).to(p.dtype)
                out[c.label] = hard - p.detach() + p
        return out

    def one_hot(self, assignment: dict) -> dict[str, torch.Tensor]:
        """label -> one-hot gate of `assignment` (label -> value): the relaxed net then runs that arch."""
        return {c.label: F.one_hot(torch.tensor(c.index(assignment[c.label])), len(c.values)).float()
                for c in self.choices}

    def assignment(self) -> dict:
        """The most probable value of every choice (the derived arch, as an assignment)."""
        out = {c.label: c.values[0] for c in self.choices if len(c.values) == 1}
        out.update({c.label: c.values[int(torch.argmax(a))] for c, a in zip(self.searched, self.logits)})
        return out

    def entropy(self, sharpness: float = 1.0) -> float:
        """Mean entropy (nats) of the searched choices' distributions `probs(sharpness)`."""
        with torch.no_grad():
            ents = [-(F.softmax(a * sharpness, 0) * F.log_softmax(a * sharpness, 0)).sum() for a in self.logits]
        return float(torch.stack(ents).mean()) if ents else 0.0


class ExpectedLatency(nn.Module):
    """E[latency] in ms under independent categorical distributions over a space's choices.

    The tables are filled once, with one batched query to the cost model (LUT or VPUNN). The fixed cost a cost
    model adds per network (a LUT's per-inference overhead) is measured as `latency_ms(blocks) - sum of block
    latencies` on the largest arch, so one-hot probabilities of an arch give exactly
    `cost_model.latency_ms(space.blocks(arch))`.

    Args:
        space: the search space (its choices give the table axes).
        terms: the cost terms covering every block of every arch once.
        cost_model: the latency source.
    """

    def __init__(self, space: SearchSpace, terms: list[CostTerm], cost_model: CostModel):
        super().__init__()
        choices = {c.label: c for c in space.choices}
        unknown = sorted({label for t in terms for label in t.labels} - set(choices))
        if unknown:
            raise ValueError(f"cost terms name labels the space lacks: {unknown}")
        per_term = []
        unique: dict[str, Block] = {}
        for term in terms:
            axes = [choices[label].values for label in term.labels]
            cells = []
            for values in itertools.product(*axes):
                blocks = term.blocks(dict(zip(term.labels, values)))
                unique.update((b.key, b) for b in blocks)
                cells.append([b.key for b in blocks])
            per_term.append((term.labels, tuple(len(a) for a in axes), cells))
        keys = list(unique)
        latency = dict(zip(keys, cost_model.block_latencies_ms([unique[k] for k in keys]))) if keys else {}
        self.labels: list[tuple[str, ...]] = []
        fixed = 0.0
        for labels, shape, cells in per_term:
            table = np.array([sum(latency[k] for k in cell) for cell in cells], dtype=np.float64).reshape(shape)
            if not labels:
                fixed += float(table)
                continue
            self.register_buffer(f"table{len(self.labels)}", torch.as_tensor(table, dtype=torch.float64))
            self.labels.append(labels)
        largest = space.blocks(space.largest())
        self.overhead_ms = cost_model.latency_ms(largest) - float(np.sum(cost_model.block_latencies_ms(largest)))
        self.fixed_ms = fixed + self.overhead_ms
        logger.info("expected latency: %d cost terms, %d distinct blocks costed on %s", len(terms), len(keys),
                    cost_model.name)

    def forward(self, probs: dict[str, torch.Tensor]) -> torch.Tensor:
        total = torch.tensor(self.fixed_ms, dtype=torch.float64)
        for i, labels in enumerate(self.labels):
            letters = string.ascii_letters[:len(labels)]
            spec = f"{letters}," + ",".join(letters) + "->"
            total = total + torch.einsum(spec, getattr(self, f"table{i}"), *(probs[l].double() for l in labels))
        return total


def relaxed_families() -> list[str]:
    """The space families that run their supernet under gates (their space's `relaxed_class`)."""
    return sorted(name for name, family in SPACES.items() if family.space_class.relaxed_class is not None)


def build_relaxed(space: SearchSpace, supernet: Optional[Supernet] = None) -> RelaxedSupernet:
    """The relaxed supernet of `space` (over `supernet`, or a new one)."""
    relaxed_class = type(space).relaxed_class
    if relaxed_class is None:
        raise ConfigError(f"search.strategy differentiable has no relaxation for space {space.family!r}; "
                          f"valid: {', '.join(relaxed_families())}")
    return relaxed_class(space, supernet if supernet is not None else space.build_supernet())
