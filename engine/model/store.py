"""Models on disk: plain ``.npy`` arrays plus a JSON manifest; written atomically; versioned.

Layout of a model directory::

    manifest.json   format name and version, settings, feature templates, training provenance, scores
    weights.npy     float32 weight vector, loaded with ``allow_pickle=False``

Loading never executes code: no pickle, the manifest is JSON, and arrays are checked against the
shapes, dtypes and SHA-256 digests the manifest records. Array files of 1 MiB or more are mapped read-only, not
read: the processes that load one model share its pages (``_read_array``). A model written by an incompatible format
version is refused with a message saying which version this engine reads.
"""

from __future__ import annotations

import hashlib
import io
import json
import mmap
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_NAME = "bp-parser-model"
FORMAT_VERSION = 1


class ModelError(ValueError):
    """A model directory that cannot be loaded, with the reason."""


@dataclass
class StoredModel:
    manifest: dict[str, Any]
    arrays: dict[str, np.ndarray]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file (training-data provenance)."""
    return _sha256(Path(path))


HALF_MIN_SIZE = 1 << 16  # float arrays at least this large are stored as float16 by ``half=True``


def half_precision(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Large float32/float64 arrays as float16 (half the size on disk; model weights need no more than
    its 11 significant bits). Small arrays (transition matrices, biases) and arrays whose values would
    overflow float16 are kept as they are. Every loader casts weights back to its working precision."""
    out = {}
    for name, arr in arrays.items():
        if arr.dtype in (np.float32, np.float64) and arr.size >= HALF_MIN_SIZE:
            with np.errstate(over="ignore"):
                half = arr.astype(np.float16)
            if np.isfinite(half).all():
                arr = half
        out[name] = arr
    return out


DIRECTORY_MODE, FILE_MODE = 0o755, 0o644  # a model is readable by every user, as a checkout of it would be


def save_model(directory: str | os.PathLike[str], manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Write ``manifest.json`` and one ``NAME.npy`` per array into ``directory``, atomically.

    Everything is written to a temporary sibling directory first and renamed into place, so a
    crash leaves either the old model or the new one, never a mix.
    """
    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        os.chmod(tmp, DIRECTORY_MODE)  # mkdtemp's 0700 would hide the model from other users (a container's)
        entries = {}
        for name, arr in arrays.items():
            path = tmp / f"{name}.npy"
            np.save(path, np.ascontiguousarray(arr), allow_pickle=False)
            entries[name] = {"file": path.name, "dtype": str(arr.dtype), "shape": list(arr.shape),
                             "sha256": _sha256(path)}
        full = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **manifest, "arrays": entries}
        with open(tmp / "manifest.json", "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), FILE_MODE)
            json.dump(full, f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def update_manifest(directory: str | os.PathLike[str], changes: dict[str, Any]) -> dict[str, Any]:
    """Merge ``changes`` into the top level of a model's manifest (its arrays untouched), atomically: the new
    manifest is written beside the old one, flushed, and renamed over it. Returns the new manifest."""
    path = Path(directory)
    manifest = {**read_manifest(path), **changes}
    fd, tmp = tempfile.mkstemp(prefix=".manifest.tmp-", dir=path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), FILE_MODE)  # mkstemp's 0600, as the manifest it replaces was not
            json.dump(manifest, f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path / "manifest.json")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return manifest


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked manifest of a model directory (format and version), without loading arrays."""
    path = Path(directory)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise ModelError(f"{path}: not a model directory (no manifest.json)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ModelError(f"{manifest_path}: invalid JSON ({e})") from e
    if manifest.get("format") != FORMAT_NAME:
        raise ModelError(f"{path}: not a {FORMAT_NAME} model (format={manifest.get('format')!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ModelError(
            f"{path}: model format version {version} is not supported; this engine reads version "
            f"{FORMAT_VERSION}. Retrain the model with this engine version."
        )
    return manifest


MAPPED_MIN_BYTES = 1 << 20  # array files at least this large are mapped into memory rather than read


def _read_array(file: Path, sha256: str | None) -> np.ndarray:
    """The array of a ``.npy`` file, checked against ``sha256`` when given. A large file is mapped read-only
    rather than read: the digest is taken over the mapping and the array is a view of it, so the bytes are
    neither copied nor read twice, and the processes that load a model (the service's parse processes, the
    workers of one machine) share its pages through the page cache. ``save_model`` replaces a model by renaming
    a new directory into place, so a mapped file is never rewritten under its readers."""
    with open(file, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < MAPPED_MIN_BYTES:
            data = f.read()
            if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
                raise ModelError(f"{file}: checksum mismatch (file corrupted or edited)")
            arr = np.load(io.BytesIO(data), allow_pickle=False)
            arr.flags.writeable = False
            return arr
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if sha256 is not None and hashlib.sha256(mapped).hexdigest() != sha256:
        mapped.close()
        raise ModelError(f"{file}: checksum mismatch (file corrupted or edited)")
    return _mapped_array(file, mapped)


def _mapped_array(file: Path, mapped: mmap.mmap) -> np.ndarray:
    """The array a mapped ``.npy`` file holds, as a read-only view of the mapping (the very bytes whose digest
    was checked: the file is not opened again). Object arrays (pickles) are refused, as ``allow_pickle=False``."""
    header = io.BytesIO(mapped[:1 << 16])  # a header is at most 65,535 bytes (format 1.0) in files numpy writes
    try:
        version = np.lib.format.read_magic(header)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(header)
    except ValueError as e:
        raise ModelError(f"{file}: not a .npy array ({e})") from e
    if dtype.hasobject:
        raise ModelError(f"{file}: an object array (pickled data) is not loaded")
    offset = header.tell()
    if offset + int(np.prod(shape)) * dtype.itemsize > len(mapped):
        raise ModelError(f"{file}: shorter than its header says")
    return np.ndarray(shape, dtype, buffer=mapped, offset=offset, order="F" if fortran else "C")


def load_model(directory: str | os.PathLike[str], *, verify: bool = True) -> StoredModel:
    """Read a model directory written by ``save_model``; raise ``ModelError`` saying what is wrong."""
    path = Path(directory)
    manifest = read_manifest(path)
    arrays = {}
    for name, entry in manifest.get("arrays", {}).items():
        file = path / entry["file"]
        if file.name != entry["file"] or not file.is_file():
            raise ModelError(f"{path}: array file {entry['file']!r} is missing")
        arr = _read_array(file, entry["sha256"] if verify else None)
        if list(arr.shape) != entry["shape"] or str(arr.dtype) != entry["dtype"]:
            raise ModelError(f"{file}: expected {entry['dtype']}{entry['shape']}, found {arr.dtype}{list(arr.shape)}")
        arrays[name] = arr
    return StoredModel(manifest, arrays)
