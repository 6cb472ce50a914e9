"""The test suite's helpers: ms_aten.testing's (one source for them), on MindSpore's CPU."""
import mindspore as ms

from ms_aten.testing import (  # noqa: F401  (re-exported for the tests)
    MODES,
    OpCell,
    as_tuple,
    assert_same,
    cotangents,
    flat,
    randn,
    regroup,
    run,
    set_mode,
    to_ms,
    to_torch,
    torch_grads,
)

ms.set_device("CPU")
