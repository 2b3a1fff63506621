"""The probes: what puts one thing under a tool or asks the GPU or the library one question,
beside the measurement core of bench/ (paired rounds, the float64 gate, results, reports),
whose ladder, bench, tune and tables make the scoreboard.

    once       `sgemmlab run`: one rung once, checked, to put under ncu or compute-sanitizer
    profile    `sgemmlab profile`: Nsight Compute on a rung and on cuBLAS, digested
    operands   `sgemmlab operands`: how Hopper delivers FFMA operands, from SASS we write
    overhead   `sgemmlab overhead`: host time per call, sgemmlab.matmul against torch.matmul

They stand on the core (check, measure, results) and nothing in the core imports them (a
contract in pyproject.toml).
"""
