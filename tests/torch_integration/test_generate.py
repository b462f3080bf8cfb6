"""Greedy generation with a KV cache in kiln (issue 32): a 6-layer GPT-2 from transformers
(random weights from its config), its prefill compiled over the prompt length and its
one-token step over the past length, each once, gives exactly eager PyTorch's tokens."""
import pytest
import torch

pytest.importorskip("transformers", reason="transformers is not installed (make installs it)")

from kiln.testing.decoder import CacheStep, cache_shape, compile_decoder, gpt2, greedy  # noqa: E402


@pytest.fixture(scope="module")
def model_and_kiln():
    model = gpt2(seed=0, layers=6, hidden=64, heads=2, vocab_size=500)
    return model, compile_decoder(model, max_length=64)


def test_greedy_generation_gives_eager_pytorchs_tokens(model_and_kiln):
    model, (prefill, step) = model_and_kiln
    eager = CacheStep(model)
    for seed, length in ((0, 16), (1, 5)):
        prompt = torch.randint(0, 500, (1, length), generator=torch.Generator().manual_seed(seed))
        want = greedy(eager, eager, prompt, 32)
        assert len(set(want[0, length:].tolist())) > 4       # not one repeated token
        assert torch.equal(greedy(prefill, step, prompt, 32), want)


def test_one_step_matches_at_any_past_length(model_and_kiln):
    model, (_, step) = model_and_kiln
    eager = CacheStep(model)
    g = torch.Generator().manual_seed(2)
    for past_len in (2, 17, 63):
        token = torch.randint(0, 500, (1, 1), generator=g)
        past = [torch.randn(cache_shape(model, past_len), generator=g) for _ in range(12)]
        got = step(token, *past)
        with torch.no_grad():
            want = eager(token, *past)
        assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want]
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
