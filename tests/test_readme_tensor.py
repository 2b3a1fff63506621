"""The README's tensor-core block (bench/readme.py): written from results files only, a
bench run at a precision as a table of paired ratios and anchor ratios, an accuracy run as
its verdicts, and neither mixed into the ladder's scoreboard."""

from __future__ import annotations

import json

import pytest

from sgemmlab.bench import readme
from sgemmlab.bench.results import SCHEMA

ENV = {"gpu": "NVIDIA H200", "driver": "580", "git_commit": "abcdef1234567"}


def _bench(tmp_path, name="bench-x.json"):
    recs = []
    for kernel, us, vs in (("cublas", 2750.0, 1.0), ("matmul[tf32x3]", 1100.0, 2.5),
                           ("tf32x3_torch", 1320.0, 2.1)):
        recs.append({"M": 4096, "N": 4096, "K": 4096, "batch": 1, "layout": "NN",
                     "kernel": kernel, "status": "ok", "median_us": us, "vs_cublas": vs,
                     "tflops": 100.0})
    path = tmp_path / name
    path.write_text(json.dumps({"schema": SCHEMA, "kind": "bench", "precision": "tf32x3",
                                "environment": ENV, "records": recs}))
    return path


def _accuracy(tmp_path):
    summary = [{"candidate": "cublas", "kind": "baseline", "cases": 2, "worst_max_ratio": 1.0,
                "worst_max_case": "a", "worst_median_ratio": 1.0, "worst_median_case": "a"},
               {"candidate": "tf32x3", "kind": "FP32", "cases": 2, "passed": 1,
                "worst_max_ratio": 1.5, "worst_max_case": "positive-256x192x256",
                "worst_median_ratio": 2.0, "worst_median_case": "positive-256x192x256"}]
    cases = [{"name": "a", "distribution": "normal"}, {"name": "b", "distribution": "positive"}]
    records = [{"case": "a", "candidate": "tf32x3", "status": "ok", "vs_cublas_max": 0.5,
                "vs_cublas_median": 0.5},
               {"case": "b", "candidate": "tf32x3", "status": "ok", "vs_cublas_max": 1.5,
                "vs_cublas_median": 2.0}]
    path = tmp_path / "accuracy-x.json"
    path.write_text(json.dumps({"schema": SCHEMA, "kind": "accuracy", "environment": ENV,
                                "summary": summary, "cases": cases, "records": records}))
    return path


def test_a_precision_run_is_a_table_of_paired_and_anchor_ratios(tmp_path):
    text = readme.tensor_board([_bench(tmp_path)])
    assert "precision='tf32x3'" in text and "abcdef1234" in text
    assert "| 4096×4096×4096 | 2.50, 1.20 |" in text  # 1320 / 1100 = 1.20 against the anchor


def test_an_accuracy_run_gives_verdicts_and_means_per_distribution(tmp_path):
    text = readme.tensor_board([_accuracy(tmp_path)])
    assert "| tf32x3 | FP32 | 1/2 | 1.50 (positive-256x192x256) | 2.00 (positive-256x192x256) |" \
        in text
    assert "| normal | 0.50 / 0.50 |" in text and "| positive | 1.50 / 2.00 |" in text
    assert "| cublas |" not in text  # the baseline is what the ratios are against


def test_update_writes_each_block_between_its_markers_only(tmp_path):
    md = tmp_path / "README.md"
    md.write_text(f"top\n{readme.BEGIN}\nold board\n{readme.END}\nmiddle\n"
                  f"{readme.TENSOR_BEGIN}\nold tensor\n{readme.TENSOR_END}\nend\n")
    readme.update(md, [_bench(tmp_path), _accuracy(tmp_path)])
    text = md.read_text()
    assert "old tensor" not in text and "old board" in text  # no ladder file: kept
    assert text.startswith("top\n") and "\nmiddle\n" in text and text.endswith("end\n")
    assert text.index("Accuracy over the fuzz set") > text.index(readme.TENSOR_BEGIN)


def test_a_block_links_its_file_from_the_document_and_names_its_kind(tmp_path):
    """results/<gpu>/<kind>/<name>: a block in docs/results.md links ../results/..., and
    names the file with its kind's folder, which the name alone no longer says."""
    kind = tmp_path / "results" / "nvidia-h200" / "bench"
    kind.mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    md = tmp_path / "docs" / "results.md"
    md.write_text(f"{readme.TENSOR_BEGIN}\n{readme.TENSOR_END}\n")
    readme.update(md, [_bench(kind, "square-20261201T165801Z.json")])
    assert ("from [`bench/square-20261201T165801Z.json`]"
            "(../results/nvidia-h200/bench/square-20261201T165801Z.json)") in md.read_text()


def test_a_readme_without_the_tensor_markers_is_refused(tmp_path):
    md = tmp_path / "README.md"
    md.write_text(f"{readme.BEGIN}\n{readme.END}\n")
    with pytest.raises(ValueError, match="no markers"):
        readme.update(md, [_bench(tmp_path)])


def test_a_rung_header_quotes_its_default_at_the_shapes_asked():
    """A bench file with `--config` candidates holds rung 24 at two configurations: its
    header's block quotes the default only, at the shapes named."""
    from pathlib import Path

    from sgemmlab.bench.readme import measured_lines

    f = (Path(__file__).resolve().parents[1] / "results" / "nvidia-h200" / "bench" /
         "2048x2048x2048-3072x3072x3072-6d360f-20261202T025914Z.json.xz")
    every = measured_lines("24_streamk_steady", [f])
    assert len(every) == 3 * 8  # 8 shapes, 3 lines each; the SPLIT=1 records left out
    assert all("SPLIT=1" not in line for line in every)
    one = measured_lines("24_streamk_steady", [f], {(4096, 4096, 4096)})
    assert len(one) == 3 and one[0].startswith("// NVIDIA H200 4096x4096x4096:")
    assert "REG_TRANSPOSE=0,SPLIT=0" in one[1]
