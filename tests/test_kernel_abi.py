"""The C boundary of specd's kernels (models/csrc/kernel_abi.h, loaded by specd.models.kernels): the
built library's ABI version and signatures against the Python declarations, the clear error a
stale or foreign library raises (stub libraries compiled here with the system C compiler), the
argument checks in front of the C calls, and the OpenMP runtime shared with torch."""

from __future__ import annotations

import ctypes
import logging
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from specd.models import int_linear, kernels
from specd.models.errors import KernelABIError, ModelError

needs_kernel = pytest.mark.skipif(kernels.unavailable() is not None, reason=str(kernels.unavailable()))
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to build a stub library")

HEADER = Path(kernels.__file__).parent / "csrc" / "kernel_abi.h"


def _stub(tmp_path: Path, version: int | None, signatures: str, own_omp: bool = True) -> str:
    """A shared library exporting the ABI functions (with ``version`` and ``signatures``; none
    when ``version`` is None), no-op kernel entry points, and ``stub_threads()``: the count last
    given to ``specd_kernel_set_threads`` (-1 before). ``own_omp``: its OpenMP entry is one of
    its own functions (a runtime that is not torch's), else NULL (built without OpenMP)."""
    lines = ["static int threads = -1;", "static int own(void) { return 0; }",
             "int stub_threads(void) { return threads; }",
             "void specd_kernel_set_threads(int n) { threads = n; }",
             f"void *specd_kernel_omp_entry(void) {{ return {'(void *)&own' if own_omp else '0'}; }}"]
    if version is not None:
        lines += [f"int specd_kernel_abi_version(void) {{ return {version}; }}",
                  f"const char *specd_kernel_abi_signatures(void) {{ return \"{signatures}\"; }}"]
    lines += [f"void {name}(void) {{}}" for name in kernels._SIGNATURES if not name.startswith("specd_")]
    src, lib = tmp_path / "stub.c", tmp_path / "libstub.so"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    return str(lib)


def _ours() -> str:
    """This module's declarations in the library's text format."""
    return ";".join(kernels.signature_table().values())


# -- the built library -----------------------------------------------------------------------


@needs_kernel
def test_built_library_carries_this_abi() -> None:
    lib = kernels.kernel().lib
    assert lib.specd_kernel_abi_version() == kernels.ABI_VERSION
    assert kernels._parse_signatures(lib.specd_kernel_abi_signatures().decode()) == kernels.signature_table()
    # the C source declares the same version as the Python constant
    m = re.search(r"#define SPECD_KERNEL_ABI_VERSION (\d+)", HEADER.read_text())
    assert m is not None and int(m.group(1)) == kernels.ABI_VERSION


@needs_kernel
def test_openmp_runtime_is_torchs(caplog: pytest.LogCaptureFixture) -> None:
    """On this machine the kernel joins torch's OpenMP pool: it is bound to the very
    ``omp_get_max_threads`` torch is, reads the thread count torch sets, and loads silently."""
    path = kernels.kernel().path
    with caplog.at_level(logging.WARNING, logger="specd.models.kernels"):
        k = kernels._Kernel(path)
    assert k.omp_shared
    assert not caplog.records
    entry = k.lib.specd_kernel_omp_entry()
    assert entry is not None and entry == kernels.torch_omp_entry()
    kernel_max_threads = ctypes.CFUNCTYPE(ctypes.c_int)(entry)
    before = torch.get_num_threads()
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            assert kernel_max_threads() == n
    finally:
        torch.set_num_threads(before)


# -- stale or foreign libraries -------------------------------------------------------------


@needs_cc
def test_wrong_version_is_a_clear_error(tmp_path: Path) -> None:
    stub = _stub(tmp_path, kernels.ABI_VERSION + 998, _ours())
    with pytest.raises(KernelABIError) as e:
        kernels._Kernel(stub)
    msg = str(e.value)
    assert f"has ABI version {kernels.ABI_VERSION + 998}, this specd expects {kernels.ABI_VERSION}" in msg
    assert stub in msg and "pip install -e ." in msg and "python setup.py build_ext --inplace" in msg
    assert isinstance(e.value, ModelError)  # callers that handle model errors handle this one


@needs_cc
def test_missing_version_symbol_is_a_clear_error(tmp_path: Path) -> None:
    stub = _stub(tmp_path, None, "")
    with pytest.raises(KernelABIError, match=r"exports no ABI version .*pip install -e \."):
        kernels._Kernel(stub)


@needs_cc
def test_changed_signature_is_a_clear_error(tmp_path: Path) -> None:
    """Same version number, but one function takes an argument fewer and q8_layer's dims table
    lost an entry: both named, with the rebuild command."""
    table = kernels.signature_table()
    table["q8_linear"] = table["q8_linear"].replace(",p)->void", ")->void")
    table["q8_layer_dims"] = table["q8_layer_dims"].replace(",bits", "")
    stub = _stub(tmp_path, kernels.ABI_VERSION, ";".join(table.values()))
    with pytest.raises(KernelABIError) as e:
        kernels._Kernel(stub)
    msg = str(e.value)
    assert "q8_linear: library 'q8_linear(p,i64,i64,p,i64,p,p)->void'" in msg
    assert "q8_layer_dims" in msg and "q8_quantize:" not in msg
    assert "pip install -e ." in msg


@needs_cc
def test_unloadable_library_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "not_a_library.so"
    bad.write_text("not ELF")
    with pytest.raises(KernelABIError, match=r"cannot load .*pip install -e \."):
        kernels._Kernel(str(bad))


@needs_cc
@pytest.mark.parametrize("own_omp", [True, False], ids=["other-runtime", "no-openmp"])
def test_foreign_openmp_runtime_falls_back_with_one_log_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, own_omp: bool) -> None:
    """A library whose OpenMP runtime is not torch's loads, with its team size fixed once (torch's
    thread count; 1 without OpenMP) and one warning saying so."""
    stub = _stub(tmp_path, kernels.ABI_VERSION, _ours(), own_omp=own_omp)
    with caplog.at_level(logging.WARNING, logger="specd.models.kernels"):
        k = kernels._Kernel(stub)
    assert not k.omp_shared
    k.lib.stub_threads.restype = ctypes.c_int
    assert k.lib.stub_threads() == (torch.get_num_threads() if own_omp else 1)
    assert len(caplog.records) == 1
    assert "does not share torch's OpenMP runtime" in caplog.records[0].getMessage()


# -- argument checks (exceptions, not asserts) ----------------------------------------------


@needs_kernel
def test_linear_argument_checks() -> None:
    layer = int_linear.Q8Linear.from_float(torch.randn(8, 64))
    with pytest.raises(ValueError, match=r"expected 64 input features .*got x of shape \(64,\)"):
        layer(torch.randn(64))
    with pytest.raises(ModelError, match=r"shape \(8, 66\) and dtype torch.int8 .*does not fit 64"):
        int_linear.Q8Linear(torch.zeros(8, 66, dtype=torch.int8), 64)
    with pytest.raises(ModelError, match=r"shape \(66,\)"):
        int_linear.Q4Linear(torch.zeros(66, dtype=torch.uint8), 64)
    with pytest.raises(ValueError, match=r"activations x of shape \(2, 48\)"):
        int_linear.quantize_activations(torch.randn(2, 48))


def _fused_decoder():
    from specd.models.decoder import Decoder
    from tests.tiny import tiny_config, tiny_weights

    c = tiny_config(vocab=96, hidden=64, layers=2, heads=4, kv_heads=2)  # head_dim 16
    make = lambda name, weight: int_linear.Q8Linear.from_float(weight())  # noqa: E731
    dec = Decoder(c, tiny_weights(c, 0), compute_dtype=torch.float32, max_len=32, linear_factory=make)
    assert dec.fused is not None
    return c, dec


@needs_kernel
def test_fused_layer_argument_checks() -> None:
    c, dec = _fused_decoder()
    fused, k, v = dec.fused, dec.cache.k, dec.cache.v
    n, hd = 3, c.head_dim
    x, cos, sin = torch.randn(n, c.hidden_size), torch.ones(n, hd), torch.zeros(n, hd)
    assert k.dtype == torch.float16  # the C layers' default cache
    with pytest.raises(TypeError, match=r"k cache: expected torch.float16 .*got torch.float32"):
        fused.run(x, 0, k.float(), v, cos, sin, None)
    with pytest.raises(ValueError, match=r"v cache: expected a contiguous tensor of shape \[2, 2, 32, 16\]"):
        fused.run(x, 0, k, v[:, :, :16], cos, sin, None)
    with pytest.raises(ValueError, match=r"x: expected a contiguous tensor of shape \[3, 64\], got shape \[3, 32\]"):
        fused.run(torch.randn(n, 32), 0, k, v, cos, sin, None)
    with pytest.raises(TypeError, match=r"x: expected torch.float32 .*got torch.float64"):
        fused.run(x.double(), 0, k, v, cos, sin, None)
    with pytest.raises(ValueError, match=r"rows 30 \.\. 32 do not fit the KV cache of 32 positions"):
        fused.run(x, 30, k, v, cos, sin, None)
    with pytest.raises(ValueError, match=r"cos: expected .*\[3, 16\], got shape \[2, 16\]"):
        fused.run(x, 0, k, v, cos[:2], sin, None)
    with pytest.raises(TypeError, match=r"mask: expected torch.uint8 .*got torch.bool"):
        fused.run(x, 0, k, v, cos, sin, torch.ones(n, n, dtype=torch.bool))
    before = k.clone()
    fused.run(x.clone(), 0, k, v, cos, sin, torch.ones(n, n, dtype=torch.uint8).tril())  # the good call runs
    assert not torch.equal(k, before)


@needs_kernel
def test_fused_layers_reject_mismatched_weights() -> None:
    from specd.models.fused_layers import FusedLayers

    c, dec = _fused_decoder()
    layers = [dict(layer) for layer in dec.layers]
    layers[1]["o"] = int_linear.Q8Linear.from_float(torch.randn(64, 32))
    with pytest.raises(ValueError, match=r"layer 1 o: expected a \[64, 64\] weight, got \[64, 32\]"):
        FusedLayers(c, layers, 32)
    layers = [dict(layer) for layer in dec.layers]
    layers[0]["down"] = int_linear.Q4Linear.from_float(torch.randn(64, c.intermediate_size))
    with pytest.raises(TypeError, match=r"layer 0 down: expected Q8Linear .*got Q4Linear"):
        FusedLayers(c, layers, 32)
    layers = [dict(layer) for layer in dec.layers]
    layers[0]["in_norm"] = torch.ones(32)
    with pytest.raises(ValueError, match=r"layer 0 in_norm: expected .*\[64\], got shape \[32\]"):
        FusedLayers(c, layers, 32)
