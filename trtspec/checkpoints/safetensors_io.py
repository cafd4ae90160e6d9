"""Streaming safetensors I/O with bounded memory.

Why not `safetensors.torch.load_file/save_file`? Loading maps whole files and saving needs every
tensor of a rank in memory at once. Converting a 70B model must not. The reader here parses the
header and reads one tensor's bytes on demand; the writer is given the full list of (name, dtype,
shape) up front, writes the header, then accepts tensors one at a time in that order. Peak memory is
the tensor being converted, not the model.

File format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N, an
N-byte JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then
the raw little-endian tensor bytes; offsets are relative to the end of the header.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch

from ..errors import TrtspecError

ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
TORCH_TO_ST = {v: k for k, v in ST_DTYPES.items()}
MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in the file
    end: int


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Parse one safetensors header; raise TrtspecError naming the file if it is corrupt."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise TrtspecError(f"{path}: corrupt safetensors file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER or 8 + n > size:
                raise TrtspecError(f"{path}: corrupt safetensors file (header length {n} exceeds file size {size})")
            header = json.loads(f.read(n))
    except OSError as e:
        raise TrtspecError(f"{path}: cannot read ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TrtspecError(f"{path}: corrupt safetensors file (header is not valid JSON)") from None
    if not isinstance(header, dict):
        raise TrtspecError(f"{path}: corrupt safetensors file (header is not a JSON object)")
    infos: dict[str, TensorInfo] = {}
    data_start = 8 + n
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = ST_DTYPES[entry["dtype"]]
            shape = tuple(int(s) for s in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise TrtspecError(f"{path}: corrupt safetensors entry for tensor '{name}'") from None
        nbytes = math.prod(shape) * dtype.itemsize
        if end - begin != nbytes or data_start + end > size:
            raise TrtspecError(
                f"{path}: corrupt safetensors file (tensor '{name}' needs {nbytes} bytes at "
                f"[{begin}, {end}) but the file holds {size - data_start} data bytes)")
        infos[name] = TensorInfo(path, dtype, shape, data_start + begin, data_start + end)
    return infos


def read_tensor(info: TensorInfo, name: str = "") -> torch.Tensor:
    """Read one tensor's bytes into a fresh CPU tensor (no mmap left behind)."""
    with open(info.file, "rb") as f:
        f.seek(info.begin)
        buf = bytearray(info.end - info.begin)
        if f.readinto(buf) != len(buf):
            raise TrtspecError(f"{info.file}: truncated data for tensor '{name}'")
    if not buf:
        return torch.empty(info.shape, dtype=info.dtype)
    return torch.frombuffer(buf, dtype=torch.uint8).view(info.dtype).reshape(info.shape)


class StreamingWriter:
    """Write a safetensors file tensor by tensor, in the order of the entries given up front."""

    def __init__(self, path: Path, entries: Iterable[tuple[str, torch.dtype, tuple[int, ...]]],
                 metadata: dict[str, str] | None = None):
        self.path = Path(path)
        self.entries = list(entries)
        header: dict[str, object] = {"__metadata__": {"format": "pt", **(metadata or {})}}
        offset = 0
        for name, dtype, shape in self.entries:
            nbytes = math.prod(shape) * dtype.itemsize
            header[name] = {"dtype": TORCH_TO_ST[dtype], "shape": list(shape),
                            "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)  # the data section starts 8-byte aligned
        self._file = open(self.path, "wb")
        self._file.write(struct.pack("<Q", len(blob)) + blob)
        self._next = 0

    def write(self, name: str, tensor: torch.Tensor) -> None:
        exp_name, exp_dtype, exp_shape = self.entries[self._next]
        if name != exp_name or tensor.dtype != exp_dtype or tuple(tensor.shape) != tuple(exp_shape):
            raise AssertionError(  # a converter bug, not a user error
                f"{self.path.name}: expected {exp_name} {exp_dtype} {exp_shape}, got {name} "
                f"{tensor.dtype} {tuple(tensor.shape)}")
        data = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        self._file.write(data.numpy().tobytes() if data.numel() else b"")
        self._next += 1

    def close(self) -> None:
        self._file.close()
        if self._next != len(self.entries):
            raise AssertionError(f"{self.path.name}: {len(self.entries) - self._next} tensors were never written")


class WeightSource:
    """Lazily readable named tensors from one model directory (or one file)."""

    def __init__(self, infos: dict[str, TensorInfo], where: Path,
                 eager: dict[str, torch.Tensor] | None = None):
        self.infos = infos
        self.where = where
        self.eager = eager or {}

    def names(self) -> set[str]:
        return set(self.infos) | set(self.eager)

    def __contains__(self, name: str) -> bool:
        return name in self.infos or name in self.eager

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.eager:
            return tuple(self.eager[name].shape)
        return self.infos[name].shape

    def dtype(self, name: str) -> torch.dtype:
        if name in self.eager:
            return self.eager[name].dtype
        return self.infos[name].dtype

    def get(self, name: str) -> torch.Tensor:
        if name in self.eager:
            return self.eager[name]
        if name not in self.infos:
            raise TrtspecError(f"{self.where}: missing tensor '{name}'")
        return read_tensor(self.infos[name], name)

    def files(self) -> list[Path]:
        return sorted({i.file for i in self.infos.values()})


def open_weights(model_dir: Path, allow_pickle: bool = False) -> WeightSource:
    """All tensors of an HF model directory: one `*.safetensors`, a sharded set with its
    `model.safetensors.index.json`, or (only with `allow_pickle`) a `pytorch_model.bin`."""
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        try:
            data = json.loads(index.read_text())
        except json.JSONDecodeError:
            data = None
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise TrtspecError(f"{index}: expected a JSON object whose 'weight_map' maps tensor names to shard files")
        infos: dict[str, TensorInfo] = {}
        for shard in sorted(set(weight_map.values())):
            shard_path = model_dir / shard
            if not shard_path.exists():
                raise TrtspecError(f"{index}: lists shard '{shard}' which does not exist")
            infos.update(read_header(shard_path))
        missing = sorted(set(weight_map) - set(infos))
        if missing:
            raise TrtspecError(f"{index}: tensor '{missing[0]}' is listed but not found in its shard")
        return WeightSource(infos, model_dir)
    files = sorted(model_dir.glob("*.safetensors"))
    if files:
        infos = {}
        for f in files:
            infos.update(read_header(f))
        return WeightSource(infos, model_dir)
    bins = sorted(model_dir.glob("pytorch_model*.bin"))
    if bins:
        if not allow_pickle:
            raise TrtspecError(
                f"{bins[0]}: pickle weights are not loaded by default; convert them to safetensors "
                "or set convert.allow_pickle (loaded with torch.load(weights_only=True))")
        eager: dict[str, torch.Tensor] = {}
        for b in bins:
            try:
                eager.update(torch.load(b, map_location="cpu", weights_only=True, mmap=True))
            except Exception as e:  # torch raises many types for a bad pickle
                raise TrtspecError(f"{b}: cannot load with weights_only=True ({type(e).__name__})") from None
        return WeightSource({}, model_dir, eager)
    raise TrtspecError(f"{model_dir}: no *.safetensors, model.safetensors.index.json or pytorch_model.bin found")
