"""Leave-one-out validation of dispatch's blend under other settings (no GPU): the weight's
power, the neighbours scored over and the support a candidate needs (dispatch/lookup.py).
The shipped setting is the first line. Prints one line per setting.

    PYTHONPATH=src python3 tools/blend_search.py [TABLE]
"""

from __future__ import annotations

import sys

from sgemmlab import dispatch
from sgemmlab.dispatch import lookup
from sgemmlab.tune import validate

SETTINGS = [(2, 8, 0.3), (1, 8, 0.3), (3, 8, 0.3), (4, 8, 0.3), (2, 4, 0.3), (2, 16, 0.3),
            (2, 8, 0.5), (2, 8, 0.1), (3, 16, 0.3)]


def main(path: str) -> None:
    table = dispatch.read_table(path)
    for power, neighbours, support in SETTINGS:
        lookup.WEIGHT_POWER, lookup.NEIGHBOURS, lookup.SUPPORT = power, neighbours, support
        s = validate.summary(validate.leave_one_out(table))
        print(f"power {power} neighbours {neighbours} support {support}: median "
              f"{s['median_loss']:.3f}, geometric mean {s['geomean_loss']:.3f}, worst "
              f"{s['worst_loss']:.3f}, within 10 % {s['within_90']:.3f}, within 3 % "
              f"{s['within_97']:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "src/sgemmlab/data/tables/nvidia-h200.json.gz")
