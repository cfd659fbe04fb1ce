"""Plain pickles of a stack's own batch classes, read through an allow-list: no code from the file runs.

SkyRL's ``TrainingInputBatch.save``, verl's ``DataProto.save_to_disk`` and
ROLL's rollout dump all ``pickle.dump`` an object of the stack's own class.
A full unpickle would import that class and run its ``__setstate__`` (and,
for DataProto, a ``torch.load(weights_only=False)`` of the tensors inside):
it needs the stack installed and runs whatever the file names. Instead
:class:`_AllowList` maps each class the stacks' own code writes to a plain
container that only stores what it is given, and refuses every other name:

* SkyRL (0.2 and later): ``_rebuild_tensor_batch(TrainingInputBatch, state)``
  becomes the ``state`` dict (``batch_dict`` of ``{"format", "data", "shape",
  "dtype"}`` per field, the numpy bytes of each tensor), ``TensorFormat`` its
  string. SkyRL 0.1 and skyrl-train pickled the batch as a plain dict
  subclass: its items, each tensor through torch's own tensor pickle
  (``torch._utils._rebuild_tensor_v2`` of a ``torch.storage._load_from_bytes``
  storage), then the same ``state`` (numpy bytes in SkyRL 0.1, ``torch.save``
  bytes per field in skyrl-train). The items repeat the state, so both
  rebuild functions stand in as :func:`_discarded`, which loads nothing, and
  the batch is read from its state alone;
* DataProto (verl, ROLL): the object becomes its ``__getstate__`` tuple
  ``(torch.save bytes of the TensorDict, non_tensor_batch, meta_info)``; the
  TensorDict bytes load with ``torch.load(weights_only=True)``, tensordict's
  consolidated rebuild function standing in as :func:`_consolidated` (which
  slices the one byte storage by the leaves' recorded offsets, as
  tensordict does, into plain tensors) and its plain one,
  ``_make_td(TensorDict, state)``, as :func:`_make_td` (which keeps the
  state's tensors). ROLL compares ``tensordict.__version__ >= "0.5.0"`` as
  text, false for the tensordict 0.10 and later it requires, so its dumps
  hold the plain form. verl's numpy mode (``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy``)
  puts ``(batch_size, device, {key: (dtype, torch.Size, uint8 array)})`` in
  place of the bytes: ``torch.Size`` stands in as ``tuple``;
* ``io.BytesIO`` (ROLL keeps the TensorDict bytes in one) becomes its bytes;
* numpy arrays (``non_tensor_batch``), ``torch.device``, and the builtins
  and containers pickle uses.

A name outside the list is refused, and with ``--trust-pickle`` the file is
unpickled in full (the stack must then be importable).
"""

from __future__ import annotations

import io
import pickle
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ImportFormatError, InputError, MissingDependencyError, UntrustedPickleError
from ._base import short

if TYPE_CHECKING:
    import torch

SKYRL_MODULES = ("skyrl.backends.skyrl_train.training_batch", "skyrl_train.training_batch")
SKYRL_BATCHES = ("TrainingInputBatch", "TrainingOutputBatch", "TensorBatch")
DATAPROTO_MODULES = ("verl.protocol", "roll.distributed.scheduler.protocol")
CONSOLIDATED = "tensordict._reductions._rebuild_tensordict_files_consolidated"


class StackBatch(dict):
    """A SkyRL batch's pickled state (``batch_dict``, ``batch_size``, ``device``, ``metadata``), as a dict."""

    stack_class: str = ""

    def __setstate__(self, state: Any) -> None:
        """SkyRL 0.1 and skyrl-train: the state follows the dict's own items (the tensors again): it replaces them."""
        if not isinstance(state, dict):
            raise pickle.UnpicklingError("a SkyRL batch whose state is not a dict")
        self.clear()
        self.update(state)


class DataProtoState:
    """A DataProto as pickled: ``state`` is its ``__getstate__`` tuple, ``stack_class`` its class's full name."""

    stack_class = ""

    def __init__(self, *args: Any) -> None:
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


class PickledBytesIO:
    """An ``io.BytesIO`` as pickled (ROLL's DataProto holds its torch.save bytes in one): only its bytes are kept."""

    def __init__(self, *args: Any) -> None:
        self.value = b""

    def __setstate__(self, state: Any) -> None:
        if not (isinstance(state, tuple) and state and isinstance(state[0], bytes)):
            raise pickle.UnpicklingError("a BytesIO whose state is not its bytes")
        self.value = state[0]


def _batch_class(qualified: str) -> type:
    return type("SkyRLBatch", (StackBatch,), {"stack_class": qualified})


def _rebuild_tensor_batch(cls: Any, state: Any) -> StackBatch:
    if not (isinstance(cls, type) and issubclass(cls, StackBatch)) or not isinstance(state, dict):
        raise pickle.UnpicklingError("_rebuild_tensor_batch called on something other than a SkyRL batch")
    out = cls()
    out.update(state)
    return out


def _device(*args: Any) -> str:
    return ":".join(str(a) for a in args)


def _discarded(*args: Any) -> None:
    """torch's tensor and storage rebuild functions inside an old SkyRL batch: its items repeat its state, which is
    what is read, so nothing is loaded here (``_load_from_bytes`` would run a full ``torch.load``)."""
    return None


def _allowed(module: str, name: str) -> Any:
    if module in SKYRL_MODULES:
        if name in SKYRL_BATCHES:
            return _batch_class(f"{module}.{name}")
        if name == "_rebuild_tensor_batch":
            return _rebuild_tensor_batch
        if name == "TensorFormat":
            return str
    if module in DATAPROTO_MODULES and name == "DataProto":
        return type("DataProto", (DataProtoState,), {"stack_class": f"{module}.{name}"})
    if (module, name) == ("_io", "BytesIO"):
        return PickledBytesIO
    if (module, name) == ("torch", "device"):
        return _device
    if (module, name) == ("torch", "Size"):
        return tuple
    if (module, name) in (("torch._utils", "_rebuild_tensor_v2"), ("torch.storage", "_load_from_bytes")):
        return _discarded
    if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name in ("_reconstruct", "scalar"):
        return getattr(np._core.multiarray, name)  # type: ignore[attr-defined]  (numpy 1.x names it numpy.core)
    if module in ("numpy.core.numeric", "numpy._core.numeric") and name == "_frombuffer":
        return np._core.numeric._frombuffer  # type: ignore[attr-defined]
    if (module, name) in (("numpy", "ndarray"), ("numpy", "dtype")):
        return getattr(np, name)
    if module == "numpy.dtypes" and name.endswith("DType"):  # numpy >= 1.25 pickles a dtype by its class
        return getattr(np.dtypes, name)
    if (module, name) in _BUILTINS:
        return _BUILTINS[(module, name)]
    return None


_BUILTINS: dict[tuple[str, str], Any] = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("builtins", "range"): range,
    ("collections", "OrderedDict"): OrderedDict,
}


class _AllowList(pickle.Unpickler):
    """An unpickler that resolves only the names above; anything else is an :class:`pickle.UnpicklingError`."""

    def find_class(self, module: str, name: str) -> Any:
        found = _allowed(module, name)
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not on the allow-list")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("a persistent id (a torch storage outside torch.save)")


def load_stack_pickle(path: Path, rel: str, trust_pickle: bool, stack: str) -> Any:
    """The pickle at ``path`` through the allow-list, or in full with ``trust_pickle`` when the list refuses it."""
    try:
        with open(path, "rb") as fh:
            return _AllowList(fh).load()
    except pickle.UnpicklingError as e:
        if "allow-list" not in str(e):
            raise ImportFormatError(f"corrupt: not a readable pickle ({short(e)})", file=rel) from None
        refused = str(e)
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError, MemoryError) as e:
        raise ImportFormatError(f"corrupt: not a readable pickle ({short(e)})", file=rel) from None
    except OSError as e:
        raise ImportFormatError(f"cannot read it ({short(e)})", file=rel) from None
    if not trust_pickle:
        raise UntrustedPickleError(
            f"{rel}: holds {refused.removesuffix(' is not on the allow-list')}, which is not one of the "
            f"classes {stack}'s dump writes; unpickling it runs code stored in the file, so it is refused by default",
            hint="pass --trust-pickle if you produced these files yourself",
        )
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except ImportError as e:  # the stack's classes are not importable here
        raise MissingDependencyError(
            f"{rel}: --trust-pickle unpickles it in full, which needs {e.name or 'the package it names'} "
            f"installed ({short(e)})",
            hint=f"install {e.name or 'it'}, or drop --trust-pickle",
        ) from None
    except Exception as e:  # the file is damaged
        raise ImportFormatError(f"cannot unpickle it in full ({short(e)})", file=rel) from None


STACK_OF_CLASS = {
    **dict.fromkeys(SKYRL_MODULES, "skyrl"),
    "verl.protocol": "verl",
    "roll.distributed.scheduler.protocol": "roll",
}
"""the module of a stack's batch class -> the ``import`` format that reads it."""


def stack_of(obj: Any) -> str | None:
    """Which stack's dump a loaded pickle is (``skyrl``, ``verl``, ``roll``), from the class it names; None when
    it names none of them."""
    qualified = getattr(obj, "stack_class", "") or f"{type(obj).__module__}.{type(obj).__qualname__}"
    return STACK_OF_CLASS.get(qualified.rpartition(".")[0])


def refuse_other_stack(obj: Any, rel: str, fmt: str) -> None:
    """A dump of another stack given as ``fmt``: say which stack wrote it, not what ``fmt``'s layout misses."""
    other = stack_of(obj)
    if other is not None and other != fmt:
        qualified = getattr(obj, "stack_class", "") or type(obj).__qualname__
        raise InputError(
            f"{rel}: this is a {STACK_NAMES[other]} dump ({qualified}), not a {STACK_NAMES[fmt]} one",
            hint=f"import it with `mismatchscope import {other}`",
        )


STACK_NAMES = {"skyrl": "SkyRL", "verl": "verl", "roll": "ROLL"}


def _consolidated(metadata: Any, storage: Any) -> dict[str, torch.Tensor]:
    """tensordict's consolidated TensorDict -> ``{key: tensor}``: each leaf is ``storage[start:stop]`` viewed as
    its dtype and shape (``pad`` bytes dropped), exactly as ``_rebuild_tensordict_files_consolidated`` slices it."""
    import torch

    out: dict[str, torch.Tensor] = {}
    for key, leaf in dict(metadata.get("leaves", {})).items():
        dtype_name, shape, start, stop, pad = leaf[:5]
        dtype = getattr(torch, str(dtype_name).removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype):
            raise pickle.UnpicklingError(f"leaf {key!r} has unknown dtype {dtype_name!r}")
        value = storage[start:stop].view(dtype)
        numel = int(np.prod(shape)) if len(shape) else 1
        out[str(key)] = value[:numel].view(tuple(shape)) if pad else value.view(tuple(shape))
    for key, sub in metadata.items():
        if key not in ("leaves", "non_tensors", "cls", "cls_metadata", "size") and isinstance(sub, dict):
            out.update({f"{key}.{k}": v for k, v in _consolidated(sub, storage).items()})
    return out


MAKE_TD = "tensordict._reductions._make_td"
TENSORDICT_CLASSES = ("tensordict._td.TensorDict", "tensordict.tensordict.TensorDict")


class _TensorDictClass:
    """What ``tensordict._td.TensorDict`` names in a pickle: only passed to :func:`_make_td`, never built."""


class TensorDictLeaves(dict):
    """A TensorDict as ``{key: tensor}`` (a nested one's keys joined by dots)."""


def _make_td(cls: Any, state: Any) -> TensorDictLeaves:
    """tensordict's ``_make_td(cls, state)`` (an unconsolidated TensorDict): its ``_tensordict`` entries, the
    tensors torch's safe loader rebuilt, nested TensorDicts flattened; nothing of tensordict runs."""
    if cls is not _TensorDictClass or not isinstance(state, dict) or not isinstance(state.get("_tensordict"), dict):
        raise pickle.UnpicklingError("_make_td called on something other than a TensorDict's state")
    out = TensorDictLeaves()
    for key, value in state["_tensordict"].items():
        if isinstance(value, TensorDictLeaves):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[str(key)] = value
    return out


def load_tensordict(blob: bytes, rel: str, trust_pickle: bool) -> dict[str, torch.Tensor]:
    """DataProto's ``torch.save``d TensorDict bytes -> ``{key: tensor}``, with torch's safe loader: consolidated
    (verl) or not (ROLL with tensordict 0.10 or later), through the stand-ins above."""
    import torch

    allowed = [(_consolidated, CONSOLIDATED), (_make_td, MAKE_TD), *((_TensorDictClass, c) for c in TENSORDICT_CLASSES)]
    try:
        with warnings.catch_warnings(), torch.serialization.safe_globals(allowed):
            warnings.simplefilter("ignore")
            td = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if not trust_pickle:
            raise UntrustedPickleError(
                f"{rel}: the DataProto's tensors are not a TensorDict of tensors ({short(e)}); "
                "unpickling them runs code stored in the file, so it is refused by default",
                hint="pass --trust-pickle if you produced these files yourself",
            ) from None
        td = _full_torch_load(blob, rel)
    except Exception as e:
        raise ImportFormatError(f"corrupt: the DataProto's tensors do not load ({short(e)})", file=rel) from None
    if td is None:
        return {}
    if isinstance(td, dict):
        return td
    try:  # a full unpickle gives a real TensorDict
        return {k: td[k] for k in td.keys()}
    except Exception as e:
        raise ImportFormatError(f"the DataProto's batch is a {type(td).__name__} ({short(e)})", file=rel) from None


def _full_torch_load(blob: bytes, rel: str) -> Any:
    """``--trust-pickle``: the tensors unpickled in full, which imports the classes the file names (tensordict)."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False)
    except ImportError as e:
        raise MissingDependencyError(
            f"{rel}: --trust-pickle unpickles the DataProto's tensors in full, which needs "
            f"{e.name or 'the package the file names'} installed ({short(e)})",
            hint=f"pip install {e.name or 'tensordict'}, or drop --trust-pickle",
        ) from None
    except Exception as e:
        raise ImportFormatError(f"corrupt: the DataProto's tensors do not load ({short(e)})", file=rel) from None
