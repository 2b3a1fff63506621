"""The start-up block of docs/results.md (bench/readme.py): a `sgemmlab firstcall` file as
the import and the first product in both import orders, what the first product loaded, and
the first calls over the shipped table's problems — from the results file only."""

from __future__ import annotations

import json

from sgemmlab.bench import readme
from sgemmlab.bench.results import SCHEMA

ENV = {"gpu": "NVIDIA H200", "driver": "580", "git_commit": "abcdef1234567"}


def _firstcall(tmp_path, early=True, loaded=()):
    records = [{"M": 1, "N": 1, "K": 1, "layout": "NN", "batch": 1, "first_ms": 27.44,
                "import_ms": 41.06, "loaded": list(loaded), "second_ms": 0.1},
               {"M": 8, "N": 8, "K": 8, "layout": "NN", "batch": 1, "first_ms": 0.9,
                "second_ms": 0.1}]
    summary = {"problems": 2, "median_first_ms": 0.9, "max_first_ms": 27.44, "compiled": 0,
               "over_target": 0, "target_ms": 50.0, "torch_first_ms": 83.6,
               "libraries_ms": {"cuda.bindings.driver": 13.6, "cuda.core": 63.2}}
    if early:
        summary["sgemmlab_first"] = {"import_ms": 0.41, "first_ms": 61.93}
    path = tmp_path / "firstcall-x.json"
    path.write_text(json.dumps({"schema": SCHEMA, "kind": "firstcall", "environment": ENV,
                                "records": records, "summary": summary}))
    return path


def test_a_firstcall_run_is_both_orders_what_was_loaded_and_the_table_problems(tmp_path):
    text = readme.startup_board([_firstcall(tmp_path)])
    assert "| `import sgemmlab` | 41.1 ms | 0.4 ms |" in text
    assert "| the process's first product, after it | 27.4 ms | 61.9 ms |" in text
    assert "loaded none of CUDA Python's libraries" in text
    assert "`cuda.core` 63 ms" in text and "commit abcdef1234" in text
    assert "median 0.90 ms, the slowest 27.4 ms, 0 compiled, 0 at or over 50 ms" in text
    older = readme.startup_board([_firstcall(tmp_path, early=False, loaded=["cuda.core"])])
    assert "| `import sgemmlab` | 41.1 ms | — |" in older and "loaded `cuda.core`" in older


def test_readme_update_fills_the_startup_block_and_nothing_else(tmp_path):
    md = tmp_path / "results.md"
    md.write_text(f"intro\n{readme.STARTUP_BEGIN}\nold\n{readme.STARTUP_END}\n"
                  f"{readme.MODELS_BEGIN}\nold models\n{readme.MODELS_END}\nend\n")
    readme.update(md, [_firstcall(tmp_path)])
    text = md.read_text()
    assert "old models" in text and "\nold\n" not in text and "41.1 ms" in text
