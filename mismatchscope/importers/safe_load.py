"""The safe loader for the pickles and torch files that RL stacks dump: nothing in a file runs unless trusted.

``torch.load(weights_only=True)`` rebuilds tensors and plain containers and
refuses every other class; :func:`load_torch` tries it first and falls back
to a full unpickle (which runs code stored in the file) only with
``--trust-pickle``. Before a file is said to need that flag its whole
structure is parsed by an inert unpickler (:func:`torch_file_problem`), so a
truncated or foreign file is called corrupt, not untrusted.

Plain pickles of a stack's own batch classes (SkyRL's ``TrainingInputBatch``,
verl's and ROLL's ``DataProto``) are read by :mod:`.stack_pickle` through an
allow-list on top of the same rules.
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path
from typing import Any

from ..errors import ImportFormatError, InputError, UntrustedPickleError
from ._base import short


def load_torch(path: Path, rel: str, trust_pickle: bool, what: str, stack: str = "slime") -> Any:
    """``torch.load`` with the safe unpickler; the full one only when trusted.

    ``what`` says, for the refusal, what in the file needs a full unpickle.
    torch blames every failure of the safe loader on ``weights_only``, a
    truncated or foreign file included, so before a file is said to need
    ``--trust-pickle`` its whole structure is checked (:func:`torch_file_problem`):
    only a sound torch.save file that holds Python objects gets that advice.
    """
    try:
        import torch
    except ImportError:
        raise InputError(f"reading {stack} dumps needs torch", hint="pip install 'mismatchscope[hf]'") from None
    try:
        with warnings.catch_warnings():  # torch's notes on pickle protocols are noise to the user
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "weights only" not in str(e).lower() and "weights_only" not in str(e):
            raise ImportFormatError(f"corrupt: not a readable torch file or pickle ({short(e)})", file=rel) from None
        problem = torch_file_problem(path)
        if problem is not None:
            raise ImportFormatError(f"corrupt: {problem}", file=rel) from None
        if not trust_pickle:
            raise UntrustedPickleError(
                f"{rel}: {what}; unpickling runs code stored in the file, so it is refused by default",
                hint="pass --trust-pickle if you produced these files yourself",
            ) from None
    except Exception as e:  # truncated or not a torch file at all
        raise ImportFormatError(f"corrupt: not a readable torch file or pickle ({short(e)})", file=rel) from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise ImportFormatError(f"corrupt: not a readable torch file or pickle ({short(e)})", file=rel) from None


_TRUNCATED = "not a readable torch file or pickle (truncated or damaged)"
_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
"""``torch.serialization.MAGIC_NUMBER``: the first pickle of a legacy (non-zip) torch.save file."""
_LEGACY_PROTOCOL = 1001


def torch_file_problem(path: Path) -> str | None:
    """Why the file is not a whole torch.save file, or None when it is one. Runs nothing from the file.

    A zip file (torch >= 1.6) must pass its CRCs and hold ``data.pkl`` plus a
    record for every storage it names. A legacy file is a sequence of
    pickles, every one of which is parsed: the magic number, the protocol
    version, the system info, the object, the storage keys; then each
    storage's element count and bytes must be there. A plain pickle (no
    magic number) is not a torch.save file at all.
    """
    import zipfile

    try:
        if zipfile.is_zipfile(path):
            return _zip_problem(path)
        with open(path, "rb") as fh:
            if fh.read(4) == b"PK\x03\x04":
                return _TRUNCATED  # a zip archive without its directory: cut short
            fh.seek(0)
            return _legacy_problem(fh)
    except Exception:  # anything that does not parse is damaged
        return _TRUNCATED


def _zip_problem(path: Path) -> str | None:
    import zipfile

    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
        if not pkl or z.testzip() is not None:
            return _TRUNCATED
        prefix = pkl[0][: -len("data.pkl")]
        parser = _InertUnpickler(z.open(pkl[0]))
        parser.load()
        if any(f"{prefix}data/{key}" not in names for key, _, _ in parser.storages):
            return _TRUNCATED
    return None


def _legacy_problem(fh: Any) -> str | None:
    try:
        magic = _InertUnpickler(fh).load()
    except Exception:
        fh.seek(0)  # a pickle cut short starts with its protocol opcode; anything else is another kind of file
        return _TRUNCATED if fh.read(1) == b"\x80" else "not a torch.save file (it does not start with a pickle)"
    if magic != _MAGIC_NUMBER or isinstance(magic, bool):
        return "not a torch.save file (a plain pickle, without torch.save's header)"
    if _InertUnpickler(fh).load() != _LEGACY_PROTOCOL or not isinstance(_InertUnpickler(fh).load(), dict):
        return _TRUNCATED
    parser = _InertUnpickler(fh)
    parser.load()
    keys = _InertUnpickler(fh).load()
    if not isinstance(keys, list):
        return _TRUNCATED
    sizes = {key: size for key, _, size in parser.storages}
    end = os.fstat(fh.fileno()).st_size
    for key in keys:  # each storage: its element count (int64), then its bytes, skipped over, not read
        head = fh.read(8)
        if len(head) < 8 or str(key) not in sizes:
            return _TRUNCATED
        want = int.from_bytes(head, "little") * sizes[str(key)]
        if fh.tell() + want > end:
            return _TRUNCATED
        fh.seek(want, 1)
    return None


class _Inert:
    """What every class and function of a parsed pickle becomes: accepts any construction, holds nothing."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Inert:
        return object.__new__(_Inert)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return _Inert()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


class _InertUnpickler(pickle.Unpickler):
    """Parses a pickle completely while running nothing from it: every global is :class:`_Inert`.

    Persistent ids (torch's storages) are recorded as ``(key, storage type, element size)``.
    """

    def __init__(self, fh: Any):
        super().__init__(fh)
        self.storages: list[tuple[str, str, int]] = []
        self._names: dict[int, str] = {}

    def find_class(self, module: str, name: str) -> Any:
        stub = type(name, (_Inert,), {"__module__": "mismatchscope.inert", "qualified": f"{module}.{name}"})
        return stub

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage":
            kind = getattr(pid[1], "qualified", "")
            self.storages.append((str(pid[2]), kind, _element_size(kind)))
        return _Inert()


_ELEMENT_SIZES = {
    "Double": 8,
    "Float": 4,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "ComplexDouble": 16,
    "ComplexFloat": 8,
    "QInt8": 1,
    "QUInt8": 1,
    "QInt32": 4,
    "QUInt4x2": 1,
    "QUInt2x4": 1,
    "Untyped": 1,
}


def _element_size(storage_type: str) -> int:
    """Bytes per element of a storage class named in a torch file (``torch.FloatStorage``: 4; untyped: 1)."""
    name = storage_type.rpartition(".")[2]
    size = _ELEMENT_SIZES.get(name.removesuffix("Storage"))
    if size is not None:
        return size
    import torch

    with warnings.catch_warnings():  # TypedStorage classes warn that they are deprecated
        warnings.simplefilter("ignore")
        dtype = getattr(getattr(torch, name, None), "dtype", None)
    return torch.empty(0, dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else 1
