"""Rungs 22 and 23 (the operand-order pass over rungs 14 and 13) and 24 and 25 (the same
with the k-loop's steady state split off) on the GPU.

The pass only reorders FFMAs that update different accumulators, so every accumulator sees
its multiply-adds in the same order as in the base rung (and the split k-loop of 24 and 25
runs the same steps in the same order): with a fixed-order decomposition
the twin's result must equal its base's bit for bit, at every shape, layout and batch. That
is a stronger check than any bound (a moved dependence, a wrong reuse flag or a stale
operand would change bits), and it comes with the float64 check beside it. Dispatch runs the
twins in place of 13 and 14 on sm_90: the API and fuzz suites exercise them at every shape
they reach; here they are named.
"""

from __future__ import annotations

import pytest

import sgemmlab
from sgemmlab import registry
from test_api_gpu import assert_matches

pytestmark = pytest.mark.gpu

NAN = float("nan")
CASES = [  # M, N, K, layout, batch
    (1, 1, 1, "NN", 1), (17, 33, 65, "TN", 1), (129, 257, 31, "NT", 1),
    (300, 200, 1000, "TT", 1), (1000, 999, 257, "NN", 1), (128, 96, 64, "NN", 3),
    (1024, 1024, 1024, "NN", 1), (256, 256, 4096, "TN", 1), (4096, 4096, 4096, "NN", 1),
    # where 24 and 25's steady loop ends: no steady step (2 k-tiles, or 3 with a partial
    # one), one, and a partial last k-tile after many
    (100, 200, 16, "NN", 1), (100, 200, 17, "TN", 1), (70, 300, 24, "NT", 1),
    (70, 300, 25, "TT", 1), (513, 257, 1003, "NN", 1),
]


def _operands(M, N, K, layout, batch):
    import torch

    lead = (batch,) if batch > 1 else ()

    def one(rows, cols, t):
        x = torch.rand(*lead, *((cols, rows) if t else (rows, cols)), device="cuda") * 2 - 1
        return x.transpose(-2, -1) if t else x

    return one(M, K, layout[0] == "T"), one(K, N, layout[1] == "T")


@pytest.mark.parametrize("twin", [22, 23, 24, 25])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_the_twin_equals_its_base_bit_for_bit_and_float64(twin, case):
    import torch

    rung = registry.rung(twin)
    cfg = rung.default(torch.cuda.get_device_name())
    if "FIXUP" in cfg:
        cfg = cfg | {"FIXUP": 0}  # the fixed-order fix-up: bit-reproducible
    _assert_twin_equals_base(rung, cfg, case)


def _assert_twin_equals_base(rung, cfg: dict, case) -> None:
    """`rung` and its base at `cfg` on one case: right against float64, and bit-identical."""
    import torch

    M, N, K, layout, batch = case
    a, b = _operands(M, N, K, layout, batch)
    outs = []
    for kernel in (rung.base, rung.number):
        c = torch.full((batch, M, N) if batch > 1 else (M, N), NAN, device="cuda")
        sgemmlab.sgemm(a, b, c, kernel=kernel, config=cfg)
        outs.append(c)
    torch.cuda.synchronize()
    assert_matches(outs[1], a.double() @ b.double(), K)
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32)), \
        f"rung {rung.number} at {registry.config_key(cfg)} differs from rung {rung.base}"


@pytest.mark.parametrize("twin", [22, 23, 24, 25])
def test_the_twin_at_its_atomic_default_is_right(twin):
    """The H200 default of rung 22 splits tiles with atomics into C (FIXUP=2)."""
    import torch

    rung = registry.rung(twin)
    a, b = _operands(2049, 1023, 3001, "NT", 1)
    c = sgemmlab.matmul(a, b, kernel=twin, config=rung.default(torch.cuda.get_device_name()))
    assert_matches(c, a.double() @ b.double(), 3001)


def test_dispatch_runs_the_twins_on_hopper():
    from sgemmlab.dispatch import choose
    from sgemmlab.runtime.device import gpu_info

    info = gpu_info()
    c = choose(4096, 4096, 4096, gpu_name=info.name, sm_count=info.sm_count, arch=info.arch)
    if info.arch != "sm_90":
        assert c.rung not in {t.label for t in registry.ORDERED}
        pytest.skip("the twins stand in for 13 and 14 on sm_90 only")
    assert c.rung in {t.label for t in registry.ORDERED}  # a stand-in, or named by the table
    a, b = _operands(4096, 4096, 4096, "NN", 1)
    assert_matches(sgemmlab.matmul(a, b), a.double() @ b.double(), 4096)


def _table_builds() -> list[tuple[int, dict]]:
    """Every build of rungs 22-25 that the shipped H200 table chooses anywhere (its winners),
    each once, at the fixed-order fix-up and without a split (those are host-side: the
    build is the same)."""

    from sgemmlab.dispatch.table import package_table_path, read_table, winners

    path = package_table_path("NVIDIA H200")
    if not path.is_file():
        return []
    seen: dict[tuple, tuple[int, dict]] = {}
    for e in winners(read_table(path).entries):
        rung = registry.rung(e["rung"])
        if rung in registry.ORDERED:
            cfg = dict(e["config"]) | ({"FIXUP": 0, "SPLIT": 0} if "FIXUP" in e["config"]
                                       else {})
            seen.setdefault((rung.number, tuple(sorted(cfg.items()))), (rung.number, cfg))
    return list(seen.values())


@pytest.mark.parametrize("build", _table_builds(),
                         ids=lambda b: f"{b[0]}-" + registry.config_key(b[1]))
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[10], CASES[13]],
                         ids=lambda c: "x".join(map(str, c)))
def test_every_build_the_table_chooses_equals_its_base(build, case):
    """The table names builds beside each rung's default (tuned at its shapes): each must
    match its base bit for bit too, at the steady loop's edges."""
    twin, cfg = build
    _assert_twin_equals_base(registry.rung(twin), cfg, case)
