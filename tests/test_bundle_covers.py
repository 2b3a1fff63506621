"""The package's bundle of prebuilt cubins covers the first calls it is for (CPU): at every
problem of the shipped table, as `sgemmlab firstcall` makes it (fresh, aligned operands in
the problem's layout), the plan loads a variant `sgemmlab warmup --bundle` builds. On the
H200 fifteen of them compiled before the bundle built float4 reads with an unaligned C
(host/firstcall-20261204T152027Z.json.xz: 0.3 to 2.6 s each)."""

from __future__ import annotations

import types

from sgemmlab import dispatch
from sgemmlab import plan as plan_mod
from sgemmlab.bench import firstcall
from sgemmlab.runtime.launch import float4_paths
from sgemmlab.runtime.variants import NO_SOURCE, variant_macros
from sgemmlab.tune import bundle

GPU, ARCH = "NVIDIA H200", "sm_90"


def _gemm(p: dict) -> plan_mod.Gemm:
    M, N, K, batch = p["M"], p["N"], p["K"], p["batch"]
    ta, tb = p["layout"][0] == "T", p["layout"][1] == "T"
    lda, ldb = (M if ta else K), (K if tb else N)
    many = batch > 1
    return plan_mod.Gemm(M, N, K, batch, ta, tb, lda, ldb, N, lda * (K if ta else M) * many,
                         ldb * (N if tb else K) * many, N * M * many, False, (M, N))


def test_every_table_problem_loads_a_bundled_variant(monkeypatch):
    monkeypatch.setattr(plan_mod, "gpu_info", lambda dev: types.SimpleNamespace(
        name=GPU, sm_count=132, arch=ARCH))
    built = {(s, tuple(sorted(m.items()))) for s, m, _ in bundle.variants(GPU, ARCH)}
    dispatch.clear_cache()
    missing = []
    for p in firstcall.problems(GPU):
        pl = plan_mod.make_plan(_gemm(p), 0, None, None, False, True)
        if pl.rung is None or pl.rung.supports("tma"):
            continue
        gm, st = pl.gemm, pl.staging
        vec4, store4 = float4_paths(pl.rung, gm.M, gm.N, gm.K, gm.trans_a, gm.trans_b,
                                    (0, 0, 0, 0), (gm.lda, gm.ldb, gm.ldc, gm.ldc),
                                    (gm.stride_a, gm.stride_b, gm.stride_c),
                                    st is not None, st is None or st.store4)
        macros = pl.rung.macros(pl.config) | variant_macros(
            pl.rung, vec4, gm.trans_a, gm.trans_b, NO_SOURCE, store4)
        if (pl.rung.source, tuple(sorted(macros.items()))) not in built:
            missing.append((p, pl.rung.label, macros))
        if st is not None and ("pack.cu", ()) not in built:
            missing.append((p, "pack.cu", {}))
    dispatch.clear_cache()
    assert not missing, f"{len(missing)} table problems compile on first use: {missing[:3]}"
