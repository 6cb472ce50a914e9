import atexit
import os
import shutil
import tempfile

import pytest

from common import MODES


@pytest.fixture(params=list(MODES))
def mode(request) -> str:
    """Each test that takes `mode` runs in GRAPH and in PYNATIVE mode."""
    return request.param


def _capture_cache_of_the_session() -> None:
    """The capture cache (ms_aten/programs/stored/) in a folder of the test session's, never the
    user's; subprocesses inherit it. Removed at exit."""
    if "MS_ATEN_PROGRAM_CACHE" not in os.environ:
        folder = tempfile.mkdtemp(prefix="ms_aten_programs_")
        os.environ["MS_ATEN_PROGRAM_CACHE"] = folder
        atexit.register(shutil.rmtree, folder, True)


_capture_cache_of_the_session()
