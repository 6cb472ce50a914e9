# source env.sh: for building your own kernels the seed's way, outside `python -m ms_aten.build`.
# It puts torch's and ms_aten's libraries on LD_LIBRARY_PATH. ms_aten itself needs none of it:
# its library carries an rpath to torch, and `import ms_aten` loads torch first.
_ms_aten_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_ms_aten_py="${_ms_aten_root}/.venv/bin/python"
[ -x "$_ms_aten_py" ] || _ms_aten_py=python3
_torch_lib="$("$_ms_aten_py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
export LD_LIBRARY_PATH="${_torch_lib}:${_ms_aten_root}/ms_aten${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
unset _ms_aten_root _ms_aten_py _torch_lib
