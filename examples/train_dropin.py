"""Train one small model twice — with torch's products, then under sgemmlab.torch_mode() —
from the same initial weights on the same batches, and print both losses and both times.

    python examples/train_dropin.py [--steps 50] [--width 2048] [--json PATH]

The model is an MLP on random regression data (nn.Linear, GELU, AdamW), big enough that its
products dominate a step. Losses agree to FP32 rounding: both runs are exact FP32 (TF32 is
switched off for torch's, as sgemmlab never uses it unasked). `--json` writes what it
printed, for a results file.

Needs: an NVIDIA GPU and torch built for CUDA (pip install -e ".[torch]"); on a machine
without them it says so in one line and exits with status 1.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import sgemmlab

try:
    import torch
except ImportError:
    torch = None


def require_gpu() -> None:
    """What this example needs, or one line that says what is missing and exit status 1."""
    if torch is None:
        sys.exit('train_dropin.py needs torch built for CUDA: pip install -e ".[torch]"')
    from sgemmlab.runtime.device import gpu_info

    try:
        gpu_info()  # sgemmlab's own check: a driver and a device it can use
    except sgemmlab.NoGPUError as exc:
        sys.exit(str(exc))
    if not torch.cuda.is_available():
        sys.exit(f"train_dropin.py: torch {torch.__version__} cannot use the GPU (a CPU-only "
                 "build, or one for a newer CUDA than the driver's)")


def make(width: int, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(width, 2 * width), torch.nn.GELU(),
        torch.nn.Linear(2 * width, 2 * width), torch.nn.GELU(),
        torch.nn.Linear(2 * width, width)).cuda()


def train(model: torch.nn.Module, batches, steps: int) -> tuple[list[float], float]:
    """Losses of `steps` AdamW steps, and the seconds they took (after one warm-up step
    on a copy, so compiles and plans are not timed)."""
    warm = copy.deepcopy(model)
    opt = torch.optim.AdamW(warm.parameters(), lr=1e-3)
    x, y = batches[0]
    torch.nn.functional.mse_loss(warm(x), y).backward()
    opt.step()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    torch.cuda.synchronize()
    return [float(v) for v in losses], time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    require_gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [(torch.randn(args.batch, args.width, device="cuda", generator=gen),
                torch.randn(args.batch, args.width, device="cuda", generator=gen))
               for _ in range(4)]
    torch_losses, torch_s = train(make(args.width), batches, args.steps)
    with sgemmlab.torch_mode() as mode:
        ours_losses, ours_s = train(make(args.width), batches, args.steps)
    worst = max(abs(a - b) / abs(a) for a, b in zip(torch_losses, ours_losses))
    out = {"steps": args.steps, "width": args.width, "batch": args.batch,
           "torch_seconds": torch_s, "sgemmlab_seconds": ours_s,
           "torch_final_loss": torch_losses[-1], "sgemmlab_final_loss": ours_losses[-1],
           "worst_relative_loss_difference": worst, "served": dict(mode.served),
           "passed": dict(mode.passed)}
    print(f"torch:    final loss {torch_losses[-1]:.6f}, {args.steps} steps in {torch_s:.3f} s")
    print(f"sgemmlab: final loss {ours_losses[-1]:.6f}, {args.steps} steps in {ours_s:.3f} s"
          f"  ({dict(mode.served)} products through sgemmlab, {dict(mode.passed)} passed to "
          f"torch)")
    print(f"worst relative difference of a step's loss: {worst:.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
