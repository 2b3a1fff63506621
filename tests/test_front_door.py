"""The front door on the CPU: `import sgemmlab` loads nothing of the library (no cuda.core,
NumPy or torch, no thread), every public name still resolves, and the compact table the
package ships makes every dispatch decision the full table rebuilt from results/ makes."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from sgemmlab import dispatch
from sgemmlab.dispatch import cache
from sgemmlab.tune.table import full_table

GPU, SMS = "NVIDIA H200", 132


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_import_loads_no_library_and_starts_no_thread():
    done = python(
        "import sys, threading, sgemmlab\n"
        "heavy = [m for m in ('cuda', 'cuda.core', 'numpy', 'torch', 'sgemmlab.api',\n"
        "                     'sgemmlab.dispatch', 'sgemmlab.runtime') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
        "print('light')\n")
    assert done.returncode == 0 and "light" in done.stdout, done.stderr[-2000:]


def test_every_public_name_resolves_on_first_use():
    done = python(
        "import sgemmlab\n"
        "from sgemmlab import matmul, sgemm, free_workspaces, OperandError, __version__\n"
        "assert sgemmlab.matmul is matmul and callable(sgemm) and callable(free_workspaces)\n"
        "assert set(sgemmlab.__all__) - {'torch_mode'} <= set(dir(sgemmlab))\n"
        "assert 'torch_mode' in dir(sgemmlab) and callable(sgemmlab.find_torch)\n"
        "assert sgemmlab.api.matmul is matmul and sgemmlab.dispatch.choose\n"
        "try:\n"
        "    sgemmlab.nothing\n"
        "except AttributeError as exc:\n"
        "    assert 'nothing' in str(exc)\n"
        "print('names')\n")
    assert done.returncode == 0 and "names" in done.stdout, done.stderr[-2000:]


def test_the_shipped_table_is_compact_and_read_at_the_first_product():
    shipped = dispatch.read_table(dispatch.package_table_path(GPU), "package")
    assert shipped.compact and dispatch.package_table_path(GPU).stat().st_size < 500_000
    kept = set(shipped.entries[0])
    assert kept == {"M", "N", "K", "layout", "batch", "aligned", "rung", "config",
                    "median_us", "vs_cublas"}
    done = python("import sgemmlab\nfrom sgemmlab.dispatch import cache\n"
                  "assert not cache.tables\nprint('unread')\n")
    assert done.returncode == 0 and "unread" in done.stdout, done.stderr[-2000:]


@pytest.fixture(scope="module")
def both_tables():
    """(compact, full): the shipped table, and the full one rebuilt from the results files
    its sources name (every entry with its spread and source)."""
    compact = dispatch.read_table(dispatch.package_table_path(GPU), "package")
    full = full_table(compact)
    assert all("source" in e for e in full["entries"]), "results/ sources not found"
    assert not dispatch.validate(full) and len(full["entries"]) == len(compact.entries)
    return compact, dispatch.Table(full, "package")


def _requests(table: dispatch.Table, count: int, seed: int = 35) -> list[dict]:
    """Every measured shape as it was measured, and `count` drawn log-uniformly over
    [1, 20000]^3 with every layout, batches, alignments and deterministic requests."""
    out = [dict(M=M, N=N, K=K, trans_a=lay[0] == "T", trans_b=lay[1] == "T", batch=b)
           for M, N, K, lay, b in table.shapes()]
    rng = random.Random(seed)

    def side() -> int:
        return max(1, int(math.exp(rng.uniform(0, math.log(20000)))))

    for _ in range(count):
        lay = rng.choice(dispatch.LAYOUTS)
        out.append(dict(M=side(), N=side(), K=side(), trans_a=lay[0] == "T",
                        trans_b=lay[1] == "T", batch=rng.choice((1, 1, 1, 2, 8, 64)),
                        aligned=rng.random() < 0.8, deterministic=rng.random() < 0.2))
    return out


def _decisions(table: dispatch.Table, requests: list[dict]) -> list[tuple]:
    dispatch.clear_cache()
    cache.tables[GPU] = table
    got = []
    for r in requests:
        c = dispatch.choose(gpu_name=GPU, sm_count=SMS, arch="sm_90", **r)
        entry = {k: c.entry[k] for k in ("M", "N", "K", "layout", "batch", "rung",
                                         "median_us", "vs_cublas")} if c.entry else None
        got.append((c.rung, dict(c.config), c.decomposition, c.source, c.distance, entry,
                    c.reason))
    dispatch.clear_cache()
    return got


def test_the_compact_table_decides_as_the_full_one(both_tables):
    compact, full = both_tables
    requests = _requests(full, 3000)
    a, b = _decisions(compact, requests), _decisions(full, requests)
    differ = [(r, x, y) for r, x, y in zip(requests, a, b) if x != y]
    assert not differ, differ[:3]
    assert {d[3] for d in a} >= {"table", "model", "heuristic"}  # every source exercised


def test_the_shipped_file_packs_its_columns_and_they_read_back_exactly(tmp_path):
    """The package's table stores its entries' columns as little-endian arrays (base64):
    written and read again, every number is the same, to the bit."""
    import gzip
    import json

    path = dispatch.package_table_path(GPU)
    on_disk = json.loads(gzip.decompress(path.read_bytes()))
    assert all(set(col) == {"dtype", "base64"} for col in on_disk["entries"].values())
    shipped = dispatch.read_table(path, "package")
    assert all(type(col) is list for col in shipped.data["entries"].values())
    again = dispatch.read_table(dispatch.write_table(shipped.data, tmp_path / "t.json.gz"))
    assert again.data == shipped.data
    listed = dict(shipped.data)  # a compact table may also give its columns as lists
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(listed))
    assert dispatch.read_table(plain).data == shipped.data


@pytest.mark.parametrize("spoil, says", [
    (lambda c: c["shape"].update(dtype="<f8"), "shape is not packed"),
    (lambda c: c["median_us"].update(base64="not base64!"), "median_us is not base64"),
    (lambda c: c["vs_cublas"].update(base64=c["vs_cublas"]["base64"][:-8]), "vs_cublas"),
    (lambda c: c["candidate"].update(base64=_packed([0, 10**6], "<i4")),
     "the columns differ in length"),
    (lambda c: c["shape"].update(base64=_packed([-1], "<i4")), "differ in length"),
    (lambda c: c["median_us"].update(extra=1), "median_us is not packed"),
])
def test_a_spoiled_packed_column_is_refused_by_name(tmp_path, spoil, says):
    import gzip
    import json

    data = json.loads(gzip.decompress(dispatch.package_table_path(GPU).read_bytes()))
    spoil(data["entries"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(dispatch.TableError, match=says):
        dispatch.read_table(bad)


def test_packed_indices_and_times_are_checked(tmp_path):
    import json

    def table(shape, cand, us):
        return {"schema": dispatch.COMPACT_SCHEMA, "gpu": GPU,
                "candidates": [["14_streamk", {"BM": 128}]],
                "shapes": [[64, 64, 64, "NN", 1, True]],
                "entries": {"shape": {"dtype": "<i4", "base64": _packed(shape, "<i4")},
                            "candidate": {"dtype": "<i4", "base64": _packed(cand, "<i4")},
                            "median_us": {"dtype": "<f8", "base64": _packed(us, "<f8")},
                            "vs_cublas": {"dtype": "<f8", "base64": _packed([1.0], "<f8")}}}

    for data, says in ((table([0], [0], [2.5]), None),
                       (table([1], [0], [2.5]), "shape is not an index into shapes"),
                       (table([0], [3], [2.5]), "candidate is not an index"),
                       (table([0], [0], [0.0]), "median_us holds a value that is not > 0"),
                       (table([0], [0], [float("nan")]), "not > 0")):
        path = tmp_path / "t.json"
        path.write_text(json.dumps(data))
        if says is None:
            t = dispatch.read_table(path)
            assert t.data["entries"]["median_us"] == [2.5] and t.entries[0]["M"] == 64
        else:
            with pytest.raises(dispatch.TableError, match=says):
                dispatch.read_table(path)


def _packed(values, dtype: str) -> str:
    import base64

    import numpy as np

    return base64.b64encode(np.asarray(values, dtype=dtype).tobytes()).decode()


def test_a_product_the_table_answers_loads_no_cost_model_and_no_cuda_library():
    """What a first product needs, and nothing more: the cost model and the heuristic load
    when a request needs them, and no CUDA Python library loads before a kernel must be
    compiled (runtime/driver.py)."""
    done = python(
        "import sys, sgemmlab.api\n"
        "from sgemmlab import dispatch\n"
        "c = dispatch.choose(1024, 1024, 1024, gpu_name='NVIDIA H200', sm_count=132,\n"
        "                    arch='sm_90')\n"
        "assert c.source == 'table', c.source\n"
        "late = [m for m in ('sgemmlab.dispatch.model', 'sgemmlab.dispatch.waves',\n"
        "                    'sgemmlab.runtime.occupancy', 'cuda.core', 'cuda.bindings.driver',\n"
        "                    'cuda.bindings.nvrtc') if m in sys.modules]\n"
        "assert not late, late\n"
        "assert dispatch.heuristic and dispatch.model.ranked and dispatch.HEURISTIC_FIXUP == 2\n"
        "print('lean')\n")
    assert done.returncode == 0 and "lean" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize("column, groups", [
    ([0, 0, 1, 1, 1, 2], [[0, 1], [2, 3, 4], [5]]),  # each shape's entries together
    ([0, 1, 0, 2, 1], [[0, 2], [1, 4], [3]]),  # a shape met again: grouped, in table order
    ([0, 3, 3, 0], [[0, 1, 2, 3]]),  # rows 0 and 3 differ in alignment alone: one key
])
def test_a_compact_tables_entries_are_grouped_by_shape_in_table_order(column, groups):
    from sgemmlab.dispatch.lookup import _grouped

    shapes = [[8, 8, 8, "NN", 1, True], [9, 8, 8, "NN", 1, True], [10, 8, 8, "TN", 1, False],
              [8, 8, 8, "NN", 1, False]]
    keys, aligned, (rows, starts) = _grouped(shapes, column)
    got = [rows[starts[i]:starts[i + 1]].tolist() for i in range(len(keys))]
    assert got == groups
    assert keys == [tuple(shapes[column[g[0]]][:5]) for g in groups]
    assert aligned == [shapes[column[g[0]]][5] for g in groups]


def test_imported_before_torch_the_operator_registers_when_a_call_needs_it():
    """sgemmlab first, then torch: a product on plain tensors leaves torch.library alone
    (registering the operator imports it, the largest part of such a program's first
    product); a call that needs the operator (autograd here) registers it."""
    pytest.importorskip("torch")
    done = python(
        "import sys, sgemmlab, torch\n"
        "a = torch.randn(4, 3)\n"
        "try:\n"
        "    sgemmlab.matmul(a, a.T)\n"
        "except sgemmlab.OperandError:\n"
        "    pass  # a CPU tensor: refused, after the plain path looked at it\n"
        "assert not hasattr(torch.ops.sgemmlab, 'matmul')\n"
        "assert 'sgemmlab.torch_ops' not in sys.modules\n"
        "g = torch.randn(4, 3, requires_grad=True)\n"
        "try:\n"
        "    sgemmlab.matmul(g, g.T.detach())  # autograd: through the operator\n"
        "except sgemmlab.OperandError:\n"
        "    pass  # (on the CPU it refuses, once the operator is there)\n"
        "assert torch.ops.sgemmlab.matmul.default\n"
        "print('registered when needed')\n")
    assert done.returncode == 0 and "registered when needed" in done.stdout, \
        done.stderr[-2000:]
