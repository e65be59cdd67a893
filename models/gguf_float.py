"""A GGUF file's tensors as float weights, dequantized one tensor at a time when asked for.

The quant modes that start from float weights (the INT4 draft, int8, bf16, fp8, fp32 and the ONNX
Runtime graphs) read a GGUF source through ``GgufFloatWeights``: no dequantized copy of the model
exists on disk, and in memory only the tensor being read (``GgufFile.dense``: its rows dequantized in chunks straight
into the result, so the peak is that tensor's own copy plus one chunk). The values are the ones
specd's former ``converted/model.safetensors`` held, bit for bit: each tensor dequantized as gguf-py
does (specd's kernels' scalar reference for the formats they run, ``gg_dequantize``, else gguf-py
itself) to float32, then matrices rounded to bfloat16 and vectors (norms, biases) kept in float32.

The token embedding can instead stay in the file's blocks (``embedding_blocks``): a lookup
dequantizes just its rows and rounds them to bfloat16, the same numbers as rows of the full
bfloat16 copy, which is never made (the 0.5B draft: 94 MB of mapped Q5_0 blocks, of which only the
rows looked up become resident, instead of a 272 MB copy).
"""

from __future__ import annotations

import torch

from specd.models.gguf_convert import hf_name
from specd.models.gguf_linear import GgufEmbedding
from specd.models.gguf_model import EMBEDDING, FLOAT_TYPES, GgufFile
from specd.models.weights import LazyWeights

MATRIX_DTYPE = torch.bfloat16  # what the converted copy stored matrices as (vectors: float32)


class RoundedEmbedding:
    """An embedding held in its GGUF blocks whose lookups come back in ``dtype``: ``emb[tokens]``
    equals ``full[tokens]`` of the full ``dtype`` copy bit for bit."""

    def __init__(self, blocks: GgufEmbedding, dtype: torch.dtype) -> None:
        self.blocks, self.dtype = blocks, dtype

    @property
    def shape(self) -> tuple[int, int]:
        return self.blocks.shape

    @property
    def nbytes(self) -> int:
        return self.blocks.nbytes

    def __getitem__(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.blocks[tokens].to(self.dtype)


class GgufFloatWeights(LazyWeights[object]):
    """The file's tensors by Hugging Face name (``model.layers.0.mlp.up_proj.weight``), each
    dequantized when asked for and not kept: matrices as bfloat16, vectors as float32.
    ``embedding_blocks``: the token embedding, when stored in blocks, as a ``RoundedEmbedding``
    over them instead (for a ``Decoder`` that only looks rows up in it: not when the output head
    is tied to it, nor on a GPU)."""

    def __init__(self, file: GgufFile, embedding_blocks: bool = False) -> None:
        self.file, self.embedding_blocks = file, embedding_blocks
        self._where = {hf_name(name): name for name in file.tensors}

    def __getitem__(self, name: str) -> object:
        gguf = self._where[name]
        qtype = self.file.qtype(gguf)
        if name == EMBEDDING and self.embedding_blocks and qtype not in FLOAT_TYPES:
            return RoundedEmbedding(GgufEmbedding(gguf, qtype, self.file.blocks(gguf), self.file.width(gguf)),
                                    MATRIX_DTYPE)
        dtype = torch.float32 if len(self.file.tensors[gguf].dims) == 1 else MATRIX_DTYPE
        return self.file.dense(gguf, dtype)
