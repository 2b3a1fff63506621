"""The Llama workloads of `sgemmlab bench --model` (bench/models.py has the method):
transformers' LlamaForCausalLM with random weights, prefill and greedy decode, eagerly and
under CUDA graphs with a static cache."""


from __future__ import annotations

import copy
import functools
import itertools
import types
from typing import Any, Callable, Iterator

from .check import relative_error
from .workload import (
    SKIP_NO_TRANSFORMERS,
    Case,
    LlamaSpec,
    Setup,
    Sides,
    _diff_check,
    _labels,
    model_bound,
    pair_record,
    skip_record,
    time_pair,
)


# -- Llama -----------------------------------------------------------------------------------
def _llama_cases(name: str, setup: Setup, spec: LlamaSpec) -> Iterator[Case]:
    try:
        import transformers  # noqa: F401
    except ImportError:
        yield Case(_labels(name, None, spec.mode, None),
                   functools.partial(skip_record, _labels(name, None, spec.mode, None),
                                     SKIP_NO_TRANSFORMERS))
        return
    import torch

    model = build_llama(spec, setup.device)
    config = {"hidden": spec.hidden, "layers": spec.layers, "heads": spec.heads,
              "intermediate": spec.intermediate, "vocab": spec.vocab,
              "attention": getattr(model.config, "_attn_implementation", None)}
    bound = model_bound(max(spec.hidden, spec.intermediate), spec.layers, setup.precision)
    g = torch.Generator(device=setup.device).manual_seed(1)
    if spec.mode == "eager":
        for batch in spec.prefill_batches:
            ids = torch.randint(3, spec.vocab, (batch, spec.prefill_tokens),
                                device=setup.device, generator=g)
            labels = _labels(name, "prefill", "eager", batch, tokens=spec.prefill_tokens,
                             config=config)
            yield Case(labels, functools.partial(_llama_prefill, setup, labels, model, ids,
                                                 bound))
    for batch in spec.decode_batches:
        prompt = torch.randint(3, spec.vocab, (batch, spec.prompt_tokens),
                               device=setup.device, generator=g)
        labels = _labels(name, "decode", spec.mode, batch, prompt_tokens=spec.prompt_tokens,
                         new_tokens=spec.new_tokens, config=config)
        yield Case(labels, functools.partial(_llama_decode, setup, spec, labels, model, prompt,
                                             bound))


def build_llama(spec: LlamaSpec, device: str):
    """A LlamaForCausalLM of `spec`'s sizes with random weights (seed 0), float32, eval."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=spec.vocab, hidden_size=spec.hidden,
                         intermediate_size=spec.intermediate, num_hidden_layers=spec.layers,
                         num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
                         max_position_embeddings=max(2048, spec.prefill_tokens,
                                                     spec.prompt_tokens + spec.new_tokens),
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: 2-3 GB of weights
        model = LlamaForCausalLM(config)
    return model.to(device=device, dtype=torch.float32).eval()


def _llama_prefill(setup: Setup, labels: dict, model, ids, bound: float) -> dict:
    import torch

    sides = Sides(setup.switch, setup.precision)

    def step():
        with torch.no_grad():
            return model(input_ids=ids).logits

    pair, reps, outs = time_pair(setup, sides, {False: step, True: step},
                                 probes={False: step, True: step})
    check = _diff_check("logits", outs[False], outs[True], bound)
    del outs
    return pair_record(labels, pair, reps, sides, check)


def _generate_kwargs(spec: LlamaSpec, prompt) -> dict:
    import torch

    n = spec.new_tokens
    return {"attention_mask": torch.ones_like(prompt), "do_sample": False,
            "max_new_tokens": n, "min_new_tokens": n, "pad_token_id": 0}


def _llama_decode(setup: Setup, spec: LlamaSpec, labels: dict, model, prompt,
                  bound: float) -> dict:
    sides = Sides(setup.switch, setup.precision)
    kw = _generate_kwargs(spec, prompt)
    if spec.mode == "graphs":
        # a captured graph keeps the kernels of its capture: each side gets its own model
        # copy, compiled function and static cache, first run with its own switch setting
        gens = {use: graphs_generate(setup, copy.deepcopy(model), prompt, kw,
                                     tag="with" if use else "without")
                for use in (False, True)}
    else:
        gens = {use: functools.partial(model.generate, prompt, **kw) for use in (False, True)}

    def probe(use: bool):
        out = gens[use](return_dict_in_generate=True, output_logits=True)
        return out.sequences, [t.clone() for t in out.logits]

    pair, reps, outs = time_pair(setup, sides, gens,
                                 probes={use: functools.partial(probe, use)
                                         for use in (False, True)})
    check = token_check(*outs[False], *outs[True], spec.prompt_tokens, bound)
    return pair_record(labels, pair, reps, sides, check)


def token_check(seq_without, logits_without, seq_with, logits_with, prompt_tokens: int,
                bound: float) -> dict:
    """Greedy decode's check: the same tokens on both sides, and the logits within the
    bound up to the first token that differs (after it, the two sides read different
    text). Where tokens differ, the baseline's margin between its top two logits at that
    step says whether it was a near tie."""
    import torch

    new_without, new_with = seq_without[:, prompt_tokens:], seq_with[:, prompt_tokens:]
    equal = bool(new_without.shape == new_with.shape and torch.equal(new_without, new_with))
    steps = min(new_without.shape[1], new_with.shape[1], len(logits_without), len(logits_with))
    differ = (new_without[:, :steps] != new_with[:, :steps]).any(dim=0).nonzero()
    upto = int(differ[0]) + 1 if len(differ) else steps
    rel = relative_error(torch.stack(logits_with[:upto], 1),
                         torch.stack(logits_without[:upto], 1))
    out = {"kind": "tokens", "tokens_equal": equal, "tokens": int(new_without.numel()),
           "max_rel_diff_logits": rel, "bound": bound, "ok": equal and rel <= bound}
    if not equal and len(differ):
        top2 = logits_without[upto - 1].double().topk(2, dim=-1).values
        out["first_diff_step"] = upto - 1
        out["margin_at_first_diff"] = float((top2[:, 0] - top2[:, 1]).min())
    return out


def _decode_forward(model, *args, **kwargs):
    return type(model).forward(model, *args, **kwargs)


def _own_code(fn: Callable, tag: str) -> Callable:
    """A copy of `fn` with a code object of its own. torch.compile keeps what it compiled
    (and so the CUDA graph captured from it) on the code object of the function it
    compiles; two sides compiled from copies never share a graph."""
    name = f"{fn.__name__}_{tag}"
    code = fn.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, fn.__globals__, name)


_compiled_serial = itertools.count()  # a new name for every compiled function


def graphs_generate(setup: Setup, model, prompt, kw: dict, tag: str) -> Callable[..., Any]:
    """model.generate with a static KV cache whose decode steps run a function compiled
    with mode="reduce-overhead" (CUDA graphs); the prefill stays eager, as transformers'
    own generate-time compile does it. A call resets the cache and returns generate's
    result."""
    import torch

    eager = model.forward
    step = setup.torch_compile(_own_code(_decode_forward, f"{tag}_{next(_compiled_serial)}"),
                               mode="reduce-overhead", fullgraph=True)

    @functools.wraps(eager)  # generate reads forward's signature
    def forward(*args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or ids.shape[-1] != 1:
            return eager(*args, **kwargs)
        # a new step: the last one's outputs, which generate has copied, may be overwritten
        torch.compiler.cudagraph_mark_step_begin()
        return step(model, *args, **kwargs)

    model.forward = forward
    extra = dict(kw)
    from transformers import GenerationConfig

    if hasattr(GenerationConfig(), "disable_compile"):  # no second compile of its own
        extra["disable_compile"] = True
    cache = static_cache(model, prompt.shape[0], prompt.shape[1] + kw["max_new_tokens"])
    if cache is None:
        extra["cache_implementation"] = "static"  # generate's own (a new one each call)
    else:
        extra[cache_argument(model)] = cache

    def generate(**more):
        if cache is not None:
            cache.reset()
        return model.generate(prompt, **extra, **more)
    return generate


def cache_argument(model) -> str:
    """The name under which forward takes the KV cache: past_key_values in transformers
    4, cache in 5."""
    import inspect

    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def static_cache(model, batch: int, length: int):
    """One StaticCache for every call (its tensors keep their addresses, which a CUDA
    graph needs), made with the arguments this transformers' StaticCache takes; None if
    it cannot be made here."""
    import inspect

    try:
        from transformers import StaticCache

        params = inspect.signature(StaticCache.__init__).parameters
        offer = {"config": model.config, "max_cache_len": length, "device": model.device,
                 "dtype": model.dtype}
        offer["max_batch_size" if "max_batch_size" in params else "batch_size"] = batch
        return StaticCache(**{k: v for k, v in offer.items() if k in params})
    except Exception:
        return None


