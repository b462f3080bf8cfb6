"""Autoregressive decoders with their KV cache as plain tensors, for kiln and its peers.

A Hugging Face causal LM keeps its cache in a Cache object; `CacheStep` wraps the model so one
decoding step is a function of tensors, forward(ids, *past) -> (logits, *present), with past
and present the per-layer keys and values (k0, v0, k1, v1, ...), each (batch, heads, length,
head_dim). With no past it is the prefill of a prompt. `compile_decoder` compiles the prefill
(over a dynamic prompt length) and the one-token step (over a dynamic past length) with kiln,
each once; `greedy` runs the same generation loop on any pair of steps.

Example:
    >>> model = gpt2(layers=6)                                       # doctest: +SKIP
    >>> prefill, step = compile_decoder(model, max_length=64)        # doctest: +SKIP
    >>> tokens = greedy(prefill, step, prompt, new_tokens=32)        # doctest: +SKIP
"""
from __future__ import annotations

import torch
from torch import nn
from torch.export import Dim


def gpt2(seed: int = 0, layers: int = 6, hidden: int = 256, heads: int = 4,
         vocab_size: int = 1000, max_positions: int = 128) -> nn.Module:
    """A GPT-2 (transformers' GPT2LMHeadModel) built from its config, seeded random weights,
    eval mode.

    Example:
        >>> model = gpt2(layers=2, hidden=64, heads=2)                 # doctest: +SKIP
    """
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    # Weights 10x transformers' initial 0.02 spread: at 0.02 a random GPT-2 repeats one token,
    # and a generation test would prove little.
    config = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=vocab_size,
                        n_positions=max_positions, bos_token_id=0, eos_token_id=0,
                        initializer_range=0.2)
    return GPT2LMHeadModel(config).eval()


def llama(seed: int = 0, layers: int = 4, hidden: int = 256, heads: int = 4,
          kv_heads: int = 2, vocab_size: int = 1000, max_positions: int = 128) -> nn.Module:
    """A Llama-style decoder (transformers' LlamaForCausalLM: RMSNorm, rotary positions,
    grouped-query attention, SwiGLU) from its config, seeded random weights, eval mode.

    Example:
        >>> model = llama(layers=2)                                    # doctest: +SKIP
    """
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, intermediate_size=hidden * 2,
                         vocab_size=vocab_size, max_position_embeddings=max_positions,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0,
                         initializer_range=0.2)
    return LlamaForCausalLM(config).eval()


class CacheStep(nn.Module):
    """One decoding step of a causal LM as a function of tensors (see the module doc)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, *past):
        from transformers.cache_utils import DynamicCache
        cache = DynamicCache()
        for layer in range(len(past) // 2):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


def cache_shape(model: nn.Module, length: int, batch: int = 1) -> tuple:
    """The shape of one layer's keys (or values) after `length` tokens.

    Example:
        >>> cache_shape(gpt2(layers=2), 5)                              # doctest: +SKIP
        (1, 4, 5, 64)
    """
    c = model.config
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return (batch, heads, length, c.hidden_size // c.num_attention_heads)


def compile_decoder(model: nn.Module, max_length: int, example_prompt: int = 8):
    """(prefill, step): kiln modules (kiln.torch.optimize) of the model's prefill over a
    prompt of 2..max_length tokens and of its one-token step over a past of 2..max_length - 1
    tokens, each compiled once for every length.

    Example:
        >>> prefill, step = compile_decoder(gpt2(), max_length=64)      # doctest: +SKIP
    """
    import kiln.torch
    wrapped = CacheStep(model).eval()
    layers = model.config.num_hidden_layers
    prompt = torch.zeros(1, example_prompt, dtype=torch.int64)
    prefill = kiln.torch.optimize(wrapped, (prompt,), dynamic_shapes=(
        {1: Dim("prompt", min=2, max=max_length)},))
    past = tuple(torch.zeros(cache_shape(model, example_prompt)) for _ in range(2 * layers))
    step = kiln.torch.optimize(
        wrapped, (torch.zeros(1, 1, dtype=torch.int64), *past),
        dynamic_shapes=(None, tuple({2: Dim("past", min=2, max=max_length - 1)}
                                    for _ in range(2 * layers))))
    return prefill, step


def greedy(prefill, step, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy generation: `prompt` (1, n) and the `new_tokens` tokens chosen after it, each
    the argmax of the last logits; `prefill(ids)` and `step(token, *past)` return
    (logits, *present) (CacheStep, or compile_decoder's kiln modules).

    Example:
        >>> greedy(CacheStep(model), CacheStep(model), prompt, 32).shape  # doctest: +SKIP
        torch.Size([1, 48])
    """
    with torch.no_grad():
        logits, *past = prefill(prompt)
        tokens = [prompt]
        for _ in range(new_tokens):
            token = logits[:, -1:].argmax(-1)
            tokens.append(token)
            logits, *past = step(token, *past)
    return torch.cat(tokens, dim=1)
