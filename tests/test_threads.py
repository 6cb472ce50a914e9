"""ms_aten.set_num_threads: validated, and applied on ms_aten's launch thread."""
import pytest
import torch

import ms_aten

from common import assert_same, run, to_ms


@pytest.fixture
def restore_threads():
    before = ms_aten.get_num_threads()
    yield
    ms_aten.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2, 0])
def test_results_do_not_depend_on_the_thread_count(mode, threads, restore_threads):
    ms_aten.set_num_threads(threads)
    assert ms_aten.get_num_threads() == threads
    x = torch.randn(256, 512)
    assert_same(run(ms_aten.op("sum.dim_IntList", dim=[1]), (to_ms(x),), mode), x.sum(1))


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_thread_counts_are_rejected(bad):
    with pytest.raises(ValueError, match="expects an int >= 0"):
        ms_aten.set_num_threads(bad)
