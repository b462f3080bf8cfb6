"""kiln.torch.optimize(..., training=True): forward and backward in kiln inside PyTorch's
autograd. SGD on the kiln module follows PyTorch's own loss curve (same seeds, same data:
every step's loss within 1e-4 relative), and gradients reach the inputs too."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kiln.torch
from kiln.testing.models import bert, example_input, resnet18

STEPS = 20


def _follow_pytorch(model, inputs, loss_fn, lr=0.05, steps=STEPS):
    """Train a copy of `model` in PyTorch and `model` through kiln side by side, in the model's
    mode; every step's losses agree within 1e-4 relative, and so do the buffers (batch norm's
    running statistics) after the last. Each step of both starts from the same seed, so
    dropout drops the same elements."""
    reference = copy.deepcopy(model)
    fast = kiln.torch.optimize(model, inputs, training=True)
    ours = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    theirs = torch.optim.SGD(reference.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step in range(steps):
        torch.manual_seed(100 + step)
        loss = loss_fn(fast(*inputs))
        ours.zero_grad()
        loss.backward()
        ours.step()
        torch.manual_seed(100 + step)
        want = loss_fn(reference(*inputs))
        theirs.zero_grad()
        want.backward()
        theirs.step()
        assert abs(loss.item() - want.item()) <= 1e-4 * abs(want.item()), \
            f"step {step}: kiln's loss {loss.item()} vs PyTorch's {want.item()}"
        losses.append(loss.item())
    assert losses[-1] < losses[0]          # it does train
    for (name, ours_b), theirs_b in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(ours_b, theirs_b, rtol=1e-4, atol=1e-5, msg=name)
    return fast, reference


def test_a_cnn_trains_like_pytorch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 10))
    x, labels = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    # lr 0.01: at 0.05 the 8 images are learnt by step 14 and the loss (1e-4) is a float32
    # difference of nearly equal numbers, whose relative rounding any kernel order changes
    fast, _ = _follow_pytorch(model, (x,), lambda out: F.cross_entropy(out, labels), lr=0.01)
    assert "the forward saves" in repr(fast)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_small_resnet_trains_like_pytorch(mode):
    # train: batch norm normalizes by the batch and updates its running statistics (compared
    # after the last step); eval: frozen statistics, as when fine-tuning. Batch 8: with 4
    # images the last stage's batch norm (1 x 1 pixels) normalizes 4 values per channel, and
    # float32 rounding (float64 gradients agree within 1e-13) grows to 1e-3 by step 4
    torch.manual_seed(0)
    model = resnet18(seed=1, width=8, layers=(1, 1, 1, 1), num_classes=10).train(mode == "train")
    (x,) = example_input(model, batch=8, image_size=32, seed=5)
    labels = torch.randint(0, 10, (8,))
    fast, reference = _follow_pytorch(model, (x,), lambda out: F.cross_entropy(out, labels),
                                      lr=0.02)
    if mode == "train":
        # the other mode is compiled when first used: validation in eval mode
        fast.eval(), reference.eval()
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)


def test_a_two_layer_bert_trains_like_pytorch_with_dropout():
    # training mode: dropout after the embeddings, on the attention weights and after each
    # sub-layer; kiln's masks are PyTorch's (drawn from its generator in eager's order)
    torch.manual_seed(0)
    model = bert(seed=3, layers=2, hidden=32, heads=4, vocab_size=64, max_position=32).train()
    (ids,) = example_input(model, batch=2, seq_len=12, seed=5)
    target = torch.randn(2, 12, 32)
    fast, _ = _follow_pytorch(model, (ids,), lambda out: F.mse_loss(out, target))
    masks = fast._current().masks
    assert sorted({m.shape for m in masks}) == [(2, 4, 12, 12), (2, 12, 32)]
    assert len(masks) == 7 and {m.p for m in masks} == {0.1}


def test_dropout_masks_are_pytorchs():
    # the same seed drops the same elements as eager PyTorch, bit for bit
    model = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 4), nn.Dropout(0.25))
    x = torch.randn(8, 16)
    reference = copy.deepcopy(model)
    fast = kiln.torch.optimize(model, (x,), training=True)
    torch.manual_seed(7)
    ours = fast(x)
    torch.manual_seed(7)
    theirs = reference(x)
    assert torch.equal(ours == 0, theirs == 0)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def _input_gradient_matches(model, x, power, rtol, atol):
    """Compiled with an example input that requires grad, the kiln module gives x the
    gradient PyTorch gives it (of sum(output ** power)); returns the kiln module."""
    reference = copy.deepcopy(model)
    fast = kiln.torch.optimize(model, (x.clone().requires_grad_(),), training=True)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    fast(ours).pow(power).sum().backward()
    reference(theirs).pow(power).sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=rtol, atol=atol)
    return fast


def test_gradients_reach_the_inputs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.LayerNorm(5), nn.Linear(5, 3))
    # an input gets a gradient when its example requires one
    _input_gradient_matches(model, torch.randn(4, 6), 2, rtol=1e-4, atol=1e-5)


def test_what_is_not_trained_like_pytorch_yet_is_refused():
    from kiln.frontend import UnsupportedOpsError
    with pytest.raises(NotImplementedError, match="momentum=None"):
        kiln.torch.optimize(nn.BatchNorm1d(3, momentum=None), (torch.randn(4, 3),),
                            training=True)
    with pytest.raises(UnsupportedOpsError, match="alpha_dropout.* in training mode"):
        kiln.torch.optimize(nn.Sequential(nn.Linear(4, 4), nn.AlphaDropout(0.2)),
                            (torch.randn(2, 4),), training=True)
    with pytest.raises(NotImplementedError, match="padding_idx"):
        kiln.torch.optimize(nn.Embedding(10, 4, padding_idx=0),
                            (torch.tensor([[0, 3, 0]]),), training=True)


def test_a_parameter_unfrozen_after_compiling_is_an_error_not_a_missing_gradient():
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    model[0].weight.requires_grad_(False)
    x = torch.randn(5, 4)
    fast = kiln.torch.optimize(model, (x,), training=True)
    fast(x).sum().backward()
    assert model[0].weight.grad is None and model[2].weight.grad is not None
    model[0].weight.requires_grad_(True)
    with pytest.raises(kiln.torch.InputError, match="'0.weight' requires grad, but it did not "
                                                    "when the model was compiled"):
        fast(x)


def test_a_model_without_expensive_ops_and_one_whose_backward_reads_its_output():
    for model in (nn.Tanh(), nn.Sequential(nn.Linear(4, 4), nn.Sigmoid())):
        fast = _input_gradient_matches(model, torch.randn(3, 4), 3, rtol=1e-5, atol=1e-6)
    assert fast.split.saves_output          # sigmoid's backward reads sigmoid's output


def test_detach_stops_gradients_as_in_pytorch():
    # a straight-through estimator: the forward value of q, the gradient of y only
    class StraightThrough(nn.Module):
        def __init__(self):
            super().__init__()
            self.y, self.q = nn.Linear(4, 3), nn.Linear(4, 3)

        def forward(self, x):
            y = self.y(x)
            return y + (self.q(x) - y).detach()
    torch.manual_seed(0)
    model, x = StraightThrough(), torch.randn(5, 4)
    reference = copy.deepcopy(model)
    fast = kiln.torch.optimize(model, (x,), training=True)
    fast(x).pow(2).sum().backward()
    reference(x).pow(2).sum().backward()
    assert model.q.weight.grad is None and reference.q.weight.grad is None
    torch.testing.assert_close(model.y.weight.grad, reference.y.weight.grad, rtol=1e-5,
                               atol=1e-6)


def test_each_combination_of_modes_compiles_as_pytorch_computes_it():
    # model.train() with a frozen batch norm (its own mode: batch norm by running statistics,
    # dropout on), then eval, then training again; the modules' own flags are left alone
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.norm = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
            self.drop, self.head = nn.Dropout(0.5), nn.Linear(4 * 6 * 6, 2)

        def forward(self, x):
            return self.head(self.drop(self.norm(self.conv(x))).flatten(1))
    torch.manual_seed(0)
    model, x = Net().train(), torch.randn(4, 3, 8, 8)
    model.norm.eval()
    reference = copy.deepcopy(model)
    fast = kiln.torch.optimize(model, (x,), training=True)
    assert not model.norm.training and model.drop.training and fast.training

    def agree(step):
        torch.manual_seed(step)
        ours = fast(x)
        torch.manual_seed(step)
        torch.testing.assert_close(ours, reference(x), rtol=1e-5, atol=1e-5)
    agree(0)
    torch.testing.assert_close(model.norm.running_mean, reference.norm.running_mean)
    fast.eval(), reference.eval()
    agree(1)
    fast.train(), reference.train()
    agree(2)                            # batch statistics now: a third compilation
    assert len(fast._compiled) == 3
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(model.norm, name), getattr(reference.norm, name))


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_dropout_that_keeps_or_drops_everything(p):
    # neither draws from the generator: p = 1 multiplies by zero, as eager does
    model, x = nn.Sequential(nn.Linear(4, 4), nn.Dropout(p)).train(), torch.randn(3, 4)
    reference = copy.deepcopy(model)
    fast = kiln.torch.optimize(model, (x,), training=True)
    assert fast._current().masks == ()
    torch.testing.assert_close(fast(x), reference(x))


def test_a_buffer_updated_in_place_and_read_by_the_backward_keeps_its_old_value_there():
    # y = x * scale, then scale decays in place: dx must use the scale the forward read
    class Decaying(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.full((4,), 2.0))

        def forward(self, x):
            y = x * self.scale
            self.scale.mul_(0.5)
            return y
    model, x = Decaying(), torch.randn(3, 4)
    fast = kiln.torch.optimize(model, (x.clone().requires_grad_(),), training=True)
    ours = x.clone().requires_grad_()
    fast(ours).sum().backward()
    torch.testing.assert_close(ours.grad, torch.full((3, 4), 2.0))
    torch.testing.assert_close(model.scale, torch.full((4,), 1.0))


def test_saved_activations_reuse_the_last_steps_tensors_once_free():
    # the backward frees them: the next step writes into them (no new pages to fault in);
    # while a step's graph is alive its tensors are left alone
    model, x = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(4, 8)
    fast = kiln.torch.optimize(model, (x,), training=True)
    runner = fast._current().forward_runner
    assert runner._recycle                  # ReLU's mask at least

    def kept():
        return {k: t.data_ptr() for k, t in runner._kept.items()}
    fast(x).sum().backward()
    first = kept()
    fast(x).sum().backward()
    assert kept() == first
    alive = fast(x)                         # its graph (and saved tensors) still alive
    assert kept() == first
    fast(x * 2).sum().backward()            # other values, in new tensors
    # a saved-tensors hook holding the tensor objects themselves keeps them too: two forwards,
    # then both backwards, give the right gradients
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        two = [fast(x), fast(x * 3)]
    for p in model.parameters():
        p.grad = None
    two[0].sum().backward()
    first_grads = [p.grad.clone() for p in model.parameters()]
    assert not set(kept().values()) & set(first.values())
    reference = copy.deepcopy(model)
    for p in model.parameters():
        p.grad = None
    alive.sum().backward()                  # the older graph's values were not overwritten
    reference(x).sum().backward()
    for p, q, h in zip(model.parameters(), reference.parameters(), first_grads):
        torch.testing.assert_close(p.grad, q.grad)
        torch.testing.assert_close(h, q.grad)   # the hooked graph's, likewise


def test_a_model_with_several_outputs_trains_like_pytorch():
    # the outputs are joined into one for kiln's gradient and come back apart; a gradient
    # PyTorch does not send (an output the loss ignores) counts as zeros
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.a, self.b = nn.Linear(6, 5), nn.Linear(5, 3), nn.Linear(5, 2)

        def forward(self, x):
            h = self.body(x).relu()
            return self.a(h), self.b(h).sigmoid()
    torch.manual_seed(0)
    model, x = Heads(), torch.randn(4, 6)
    reference = copy.deepcopy(model)
    fast = kiln.torch.optimize(model, (x,), training=True)
    (y1, y2), (w1, w2) = fast(x), reference(x)
    torch.testing.assert_close(y1, w1), torch.testing.assert_close(y2, w2)
    (y1.pow(2).sum() + y2.sum()).backward()
    (w1.pow(2).sum() + w2.sum()).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    model.zero_grad(), reference.zero_grad()
    fast(x)[1].sum().backward()
    reference(x)[1].sum().backward()
    # (eager leaves a head the loss ignores without a gradient, None; kiln gives it zeros)
    assert reference.a.weight.grad is None
    assert not model.a.weight.grad.any() and not model.a.bias.grad.any()
    torch.testing.assert_close(model.body.weight.grad, reference.body.weight.grad, rtol=1e-5,
                               atol=1e-6)
