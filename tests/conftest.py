import pytest

from common import MODES


@pytest.fixture(params=list(MODES))
def mode(request) -> str:
    """Each test that takes `mode` runs in GRAPH and in PYNATIVE mode."""
    return request.param
