"""Reading an ONNX file and its tensors, external data included, without trusting either.

A truncated or corrupt file is an error naming the file. External data is read only from inside
the model's folder (no absolute path, no '..', no symbolic link leading out), and each tensor's
offset and length are checked against the file's size before anything is read."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .errors import OnnxImportError

# ONNX TensorProto.DataType -> the IR's dtype name (the ones the IR has).
DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
          9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


def ir_dtype(elem_type: int, where: str) -> str:
    dtype = DTYPES.get(elem_type)
    if dtype is None:
        import onnx

        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() \
            else str(elem_type)
        known = ", ".join(sorted(set(DTYPES.values())))
        raise OnnxImportError(f"{where}: dtype {name} is not supported (the IR has {known})")
    return dtype


def load_model(model):
    """``model`` (a path or a ModelProto) as a ModelProto, and the folder its external data is in
    (None for an in-memory model: it may hold no external data)."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        return model, None
    path = Path(model)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise OnnxImportError(f"cannot read ONNX model {path}: {error.strerror or error}", "invalid") from None
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise OnnxImportError(f"{path} is not a valid ONNX model (truncated or corrupt: {error})",
                              "invalid") from None
    if not proto.HasField("graph"):
        raise OnnxImportError(f"{path} is not a valid ONNX model: it has no graph", "invalid")
    return proto, path.resolve().parent


def tensor_to_array(tensor, folder: Path | None, where: str) -> np.ndarray:
    """An initializer or a Constant's value as a numpy array."""
    from onnx import numpy_helper

    dtype = ir_dtype(tensor.data_type, where)
    if tensor.data_location == 1:  # TensorProto.EXTERNAL
        return _external(tensor, folder, dtype, where)
    try:
        array = numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as error:
        raise OnnxImportError(f"{where}: cannot read tensor '{tensor.name}': {error}", "invalid") from None
    return np.asarray(array.astype(dtype, copy=False), order="C")  # ascontiguousarray would make 0-d 1-d


def _external(tensor, folder: Path | None, dtype: str, where: str) -> np.ndarray:
    info = {entry.key: entry.value for entry in tensor.external_data}
    name = tensor.name or "<unnamed>"
    if folder is None:
        raise OnnxImportError(f"{where}: tensor '{name}' keeps its data in an external file; "
                              "import the model from its path so that the file can be found", "invalid")
    location = info.get("location", "")
    file = safe_path(folder, location, f"{where}: tensor '{name}'")
    try:
        offset = int(info.get("offset", "0"))
        shape = tuple(int(d) for d in tensor.dims)
    except ValueError:
        raise OnnxImportError(f"{where}: tensor '{name}' has a malformed offset", "invalid") from None
    itemsize = np.dtype(dtype).itemsize
    expected = int(np.prod(shape, dtype=np.int64)) * itemsize
    length = int(info["length"]) if "length" in info else expected
    size = file.stat().st_size
    if offset < 0 or length < 0 or offset + length > size:
        raise OnnxImportError(f"{where}: tensor '{name}' reads bytes {offset}..{offset + length} of {location}, "
                              f"which holds {size}", "invalid")
    if length != expected:
        raise OnnxImportError(f"{where}: tensor '{name}' of shape {shape} {dtype} needs {expected} bytes, "
                              f"its external data has {length}", "invalid")
    with open(file, "rb") as handle:
        handle.seek(offset)
        data = handle.read(length)
    array = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)
    return np.asarray(array, order="C")


def safe_path(folder: Path, location: str, where: str) -> Path:
    """``location`` inside ``folder``, or an error: absolute paths, '..' and links leading out are refused."""
    if not location or os.path.isabs(location) or Path(location).is_absolute():
        raise OnnxImportError(f"{where}: external data path {location!r} must be relative to the model's folder",
                              "invalid")
    if ".." in Path(location).parts:
        raise OnnxImportError(f"{where}: external data path {location!r} leaves the model's folder", "invalid")
    resolved = (folder / location).resolve()
    if folder.resolve() not in resolved.parents:
        raise OnnxImportError(f"{where}: external data path {location!r} leads outside the model's folder",
                              "invalid")
    if not resolved.is_file():
        raise OnnxImportError(f"{where}: external data file {location!r} does not exist", "invalid")
    return resolved
