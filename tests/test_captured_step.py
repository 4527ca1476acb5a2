"""Fixed-network training steps replayed as CUDA graphs (nas.training.captured_step): refused where they cannot run, and
on a GPU equal to the eager step, following the schedule's learning rate and the per-step dropout seed. The CPU path's
results are pinned bit for bit by the smoke runs' golden candidates (conftest.assert_candidates_unchanged)."""
import pytest
import torch
import torch.nn as nn

from nas.training.captured_step import WARMUP_STEPS, CapturedTrainStep, capture_refusal

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU (run on the lent H200)")


def _net(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Dropout(dropout), nn.Linear(8, 10))


def _loss(out, y, _teacher):
    return nn.functional.cross_entropy(out, y)


def test_capture_refused_where_it_cannot_run():
    net = _net()
    adamw, sgd = torch.optim.AdamW(net.parameters()), torch.optim.SGD(net.parameters(), lr=0.1)
    assert capture_refusal(torch.device("cpu"), adamw, True) == "not on CUDA"
    assert capture_refusal(torch.device("cuda"), adamw, False) == "train.cuda_graphs is off"
    assert "SGD" in capture_refusal(torch.device("cuda"), sgd, True)
    assert capture_refusal(torch.device("cuda"), adamw, True) is None


def _batches(n: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 1, 8, 8, generator=g).cuda(), torch.randint(0, 10, (16,), generator=g).cuda())
            for _ in range(n)]


@cuda
def test_captured_steps_equal_eager_steps():
    batches, lrs = _batches(6), [1e-3, 2e-3, 3e-3, 2e-3, 1e-3, 5e-4]
    eager_net, graphed_net = _net().cuda().train(), _net().cuda().train()
    eager_opt = torch.optim.AdamW(eager_net.parameters(), lr=1e-3, weight_decay=0.05)
    graphed_opt = torch.optim.AdamW(graphed_net.parameters(), lr=1e-3, weight_decay=0.05)
    step = CapturedTrainStep(graphed_net, graphed_opt, _loss, grad_clip=5.0)
    for (x, y), lr in zip(batches, lrs):
        for group in eager_opt.param_groups:
            group["lr"] = lr
        eager_opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = _loss(eager_net(x), y, None)
        loss.backward()
        nn.utils.clip_grad_norm_(eager_net.parameters(), 5.0)
        eager_opt.step()
        for group in graphed_opt.param_groups:
            group["lr"] = lr
        assert torch.isclose(step(x, y), loss.detach().float(), rtol=1e-2)
    assert step.graph is not None and step.eager_steps == WARMUP_STEPS
    for a, b in zip(eager_net.state_dict().values(), graphed_net.state_dict().values()):
        torch.testing.assert_close(a.float(), b.float(), rtol=1e-2, atol=1e-3)
    assert all(isinstance(g["lr"], float) for g in graphed_opt.param_groups)  # checkpoints keep plain floats


@cuda
def test_replay_follows_learning_rate_and_dropout_seed():
    net = _net(dropout=0.5).cuda().train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    step = CapturedTrainStep(net, opt, _loss, grad_clip=0.0)
    (x, y), = _batches(1)
    for _ in range(WARMUP_STEPS + 1):
        step(x, y)
    for group in opt.param_groups:
        group["lr"] = 0.0
    weights = [p.detach().clone() for p in net.parameters()]
    losses = {}
    for seed in (7, 7, 8):
        torch.cuda.manual_seed(seed)
        losses.setdefault(seed, []).append(step(x, y).item())
    assert all(torch.equal(a, b) for a, b in zip(weights, net.parameters()))  # lr 0: no update, decay included
    assert losses[7][0] == losses[7][1] != losses[8][0]
