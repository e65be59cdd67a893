"""``python -m llama_cpp.server`` with weight repacking off (llama-server's ``--no-repack``).

On this machine class (Sapphire Rapids under a hypervisor) ggml's CPU build, compiled with
``-march=native``, repacks weights for AMX and then crashes in ``ggml_backend_amx_mul_mat``
(SIGSEGV at the first matmul; llama-server and llama-bench alike). llama-cpp-python's server has no
flag for it, so this wrapper clears ``use_extra_bufts`` in the default model parameters before the
server builds its model. Elsewhere it only skips the repacking (slower, same results).
"""

from __future__ import annotations

import runpy

import llama_cpp.llama_cpp as lib

_defaults = lib.llama_model_default_params


def _no_repack():  # type: ignore[no-untyped-def]
    params = _defaults()
    params.use_extra_bufts = False
    return params


lib.llama_model_default_params = _no_repack
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
