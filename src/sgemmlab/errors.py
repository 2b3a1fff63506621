"""Every exception sgemmlab raises on purpose, in one place (`sgemmlab` exports them all).

Each message names the problem and the operand or setting at fault; nothing is launched when
one is raised.
"""

from __future__ import annotations


class NoGPUError(RuntimeError):
    """No usable NVIDIA GPU (no driver, or no device)."""


class OperandError(ValueError):
    """An operand sgemmlab cannot use as it is; the message names the problem."""


class LayoutError(OperandError):
    """An operand whose strides are neither row- nor column-major (a copy would fix it)."""


class ConfigError(ValueError):
    """A configuration the registry calls illegal, or a rung that cannot serve the call; the
    message lists the broken rules."""


class DispatchError(ValueError):
    """No rung can serve the request (the message says which feature is missing)."""


class TableError(ValueError):
    """A tuning table file that is not one, or is malformed; the message names the file."""
