"""Where a model's step spends its GPU time, with and without the drop-in switch: torch's
profiler around one step of each side (after warm-up), its operators grouped by name and
input shapes, the two sides joined and sorted by what the switch gains or loses.

    python tools/model_profile.py [--workload llama-prefill-8] [--top 25] [--out FILE]
                                  [--precision tf32x3]

Workloads: llama-prefill-1, llama-prefill-8 (bench/models.py's LLAMA at 512 tokens),
encoder-train, encoder-infer (its d 1024 x 6 encoder at 16 x 512 tokens). The table names
the aten operators (a product the switch serves is still recorded as its aten op) with
device microseconds per step on each side, and each side's wall time per step outside the
profiler: where the wall time exceeds the device time, the host (Python, launches) is what
the GPU waits on. --precision: the switch's (torch_mode(precision=...)); torch's side is
always exact FP32.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

import sgemmlab  # noqa: E402
from sgemmlab.bench import models  # noqa: E402


def _step(name: str):
    """The step of workload `name`, a callable with no arguments."""
    if name.startswith("llama-prefill"):
        batch = int(name.rsplit("-", 1)[1])
        model = models.build_llama(models.LLAMA, "cuda")
        g = torch.Generator(device="cuda").manual_seed(1)
        ids = torch.randint(3, models.LLAMA.vocab, (batch, models.LLAMA.prefill_tokens),
                            device="cuda", generator=g)

        def step():
            with torch.no_grad():
                return model(input_ids=ids).logits
        return step
    spec = models.EncoderSpec(1024, 6, 16, 4096, batch=16, seq=512)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(spec.d, spec.heads, spec.ff, dropout=0.0,
                                             batch_first=True, device="cuda")
    base = torch.nn.TransformerEncoder(layer, spec.layers, enable_nested_tensor=False)
    x = torch.randn(spec.batch, spec.seq, spec.d, device="cuda")
    target = torch.randn_like(x)
    if name == "encoder-infer":
        model = copy.deepcopy(base).eval()

        def step():
            with torch.no_grad():
                return model(x)
        return step
    model = copy.deepcopy(base).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), target).backward()
        opt.step()
    return step


def _profile(step, use: bool, reps: int = 3,
             precision: str | None = None) -> tuple[dict[tuple, tuple[int, float]], float]:
    """((op name, input shapes) -> (calls, device µs) per step; wall µs per step)."""
    import time

    from torch.profiler import ProfilerActivity, profile

    mode = sgemmlab.torch_mode(precision=precision) if use else None
    if mode:
        mode.enable()
    try:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / reps * 1e6
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU],
                     record_shapes=True) as prof:
            for _ in range(reps):
                step()
            torch.cuda.synchronize()
    finally:
        if mode:
            mode.disable()
    out = {}
    for e in prof.key_averages(group_by_input_shape=True):
        dev = getattr(e, "self_device_time_total", None)
        if dev is None:
            dev = e.self_cuda_time_total
        if dev <= 0:
            continue
        # a kernel (device-side event) under "kernel", an operator by its name and shapes
        kernel = str(getattr(e, "device_type", "")).endswith("CUDA")
        key = ("kernel: " + e.key, "") if kernel else (e.key, str(e.input_shapes))
        out[key] = (e.count // reps, dev / reps)
    return out, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", action="append")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out")
    ap.add_argument("--precision", help="the switch's precision (default: follow torch)")
    args = ap.parse_args()
    lines = []
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    for name in args.workload or ["llama-prefill-8"]:
        step = _step(name)
        runs = {use: _profile(step, use, precision=args.precision) for use in (False, True)}
        sides = {use: runs[use][0] for use in runs}
        wall = {use: runs[use][1] for use in runs}
        tot = {use: sum(us for (op, _), (_, us) in sides[use].items()
                        if op.startswith("kernel: ")) for use in sides}
        switch = f"the switch ({args.precision})" if args.precision else "the switch"
        lines.append(f"== {name}: device µs per step, torch {tot[False]:.0f}, with "
                     f"{switch} {tot[True]:.0f} (ratio {tot[False] / tot[True]:.3f}); wall µs "
                     f"per step {wall[False]:.0f} and {wall[True]:.0f}")
        keys = set(sides[False]) | set(sides[True])
        rows = []
        for k in keys:
            n0, t0 = sides[False].get(k, (0, 0.0))
            n1, t1 = sides[True].get(k, (0, 0.0))
            rows.append((t1 - t0, k, n0, t0, n1, t1))
        rows.sort(key=lambda r: -abs(r[0]))
        lines.append(f"{'op':<34} {'calls':>6} {'torch µs':>10} {'switch µs':>10} "
                     f"{'diff':>9}  shapes")
        for d, (op, shapes), n0, t0, n1, t1 in rows[:args.top]:
            lines.append(f"{op[:34]:<34} {max(n0, n1):>6} {t0:>10.0f} {t1:>10.0f} "
                         f"{d:>+9.0f}  {shapes[:120]}")
        del step, sides
        torch.cuda.empty_cache()
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
