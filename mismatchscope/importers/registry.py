"""Every import format and routes encoding, one registered object each, each declaring the protocol it implements.

An import format (``mismatchscope import FORMAT``) is a :class:`Format`: the
``module:Class`` of its importer, the protocol of ``_base`` that class
implements (records of a JSONL file, whole files, or whole files of a dump that
holds the sampler's side only), one line on what SRC should be, and whether its
dumps are pickles. A routes encoding (``--routes-format``) is a
:class:`RouteEncoding`: its decoder and, where a stack's own dump holds the
routes, the module that reads them there. The import dispatches on what an
entry declares, never on what an object happens to have, and
:func:`unimplemented` says what a registered object lacks of what it declares
(``tests/importers/test_registry.py`` holds every entry to it).

Classes and modules are named as text and loaded on first use: every command's
start-up reads the names here, only ``import`` needs the code.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Protocol

from ._base import FileImporter, Importer, JsonlImporter, SamplerOnlyImporter
from .route_sources import DumpRoutes, RouteDecoder


def _load(target: str) -> Any:
    """``"module:name"`` (or ``"module"``) under this package, imported."""
    module, _, name = target.partition(":")
    loaded = importlib.import_module(f"{__package__}.{module}")
    return getattr(loaded, name) if name else loaded


@dataclass(frozen=True)
class Format:
    """One ``import FORMAT``: its importer and what the importer declares it implements."""

    name: str
    importer: str
    """``module:Class`` of the importer, constructed with the ``--column`` mapping."""
    protocol: type
    """what the importer implements: :class:`JsonlImporter` (one record at a time, through the JSONL engine),
    :class:`FileImporter` (one whole file at a time) or :class:`SamplerOnlyImporter` (a file importer whose
    dump holds the sampler's side only, so each sequence's ids are written for ``rescore``)."""
    layout: str
    """one line on what SRC should be (``--help`` and error hints)."""
    title: str
    """how ``import --help`` names what writes it: the stack, or the file type of a user's own dump."""
    own: bool = False
    """a user's own files (a column mapping), not a stack's dump."""
    pickled: bool = False
    """its dumps are pickles: ``--trust-pickle`` means something for it."""
    dump_files: str | None = None
    """the file names that tell its batch pickles apart, for a dump given as another stack's."""

    def load(self) -> type[Importer]:
        return _load(self.importer)

    def implements(self, protocol: type) -> bool:
        """Whether the declared protocol is ``protocol`` or refines it."""
        return protocol in self.protocol.__mro__


@dataclass(frozen=True)
class RouteEncoding:
    """One ``--routes-format``: its decoder, and where routes are read in place from a stack's dump."""

    name: str
    decoder: str
    """``module:function`` implementing :class:`RouteDecoder`."""
    dump: str | None = None
    """module implementing :class:`DumpRoutes`, for a stack whose own dump holds the routes (slime, SkyRL)."""

    def decode(self) -> RouteDecoder:
        return _load(self.decoder)

    def dump_reader(self) -> DumpRoutes | None:
        return None if self.dump is None else _load(self.dump)


IMPORTERS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "nemo-rl",
            "nemo_rl:NemoRLImporter",
            JsonlImporter,
            "point at NeMo-RL's log directory (it holds exp_NNN/train_data_step{N}.jsonl)",
            "NeMo-RL",
        ),
        Format(
            "prime-rl",
            "prime_rl:PrimeRLImporter",
            JsonlImporter,
            "point at the trainer's output_dir (it holds token_exports/step_{N}/rank_{R}.jsonl) "
            "of a run with trainer.enable_token_export = true",
            "prime-rl",
        ),
        Format(
            "slime",
            "slime:SlimeImporter",
            FileImporter,
            "point at the --dump-details folder (it holds train_data/ and rollout_data/)",
            "slime",
            pickled=True,
        ),
        Format(
            "skyrl",
            "skyrl:SkyRLImporter",
            FileImporter,
            "point at the trainer's export_path (it holds dumped_data/global_step_{N}_training_input.pkl) "
            "of a run with trainer.dump_data_batch=true",
            "SkyRL",
            pickled=True,
            dump_files="global_step_{N}_training_input.pkl",
        ),
        Format(
            "verl",
            "verl:VerlImporter",
            SamplerOnlyImporter,
            "point at skip.rollout's dump_dir (it holds .../{step}/gen_batch.dp) of a run with "
            "skip.rollout.enable=true",
            "verl",
            pickled=True,
            dump_files=".../{step}/gen_batch.dp",
        ),
        Format(
            "roll",
            "roll:RollImporter",
            SamplerOnlyImporter,
            "point at rollout_mock's dump_dir (it holds train/step_{N:06d}.pkl) of a run with rollout_mock "
            "enable=true, mode=dump",
            "ROLL",
            pickled=True,
            dump_files="step_{N:06d}.pkl",
        ),
        Format(
            "jsonl",
            "generic:GenericJsonlImporter",
            JsonlImporter,
            "point at a .jsonl file or a folder of them",
            "JSONL",
            own=True,
        ),
        Format(
            "parquet",
            "generic_parquet:GenericParquetImporter",
            FileImporter,
            "point at a .parquet file or a folder of them",
            "Parquet",
            own=True,
        ),
    )
}
"""format name -> its entry, in the order ``--help`` lists them."""


def logged_by() -> str:
    """What ``import`` reads, for its help: every stack, then a user's own files."""
    stacks = [f.title for f in IMPORTERS.values() if not f.own]
    own = "/".join(f.title for f in IMPORTERS.values() if f.own)
    return f"{', '.join(stacks)}, or your own {own}"


ROUTE_ENCODINGS: dict[str, RouteEncoding] = {
    e.name: e
    for e in (
        RouteEncoding("sglang", "route_sources:decode_sglang"),
        RouteEncoding("vllm", "route_sources:decode_vllm"),
        RouteEncoding("vllm-0.21", "route_sources:decode_vllm_021"),
        RouteEncoding("verl", "route_sources:decode_verl"),
        RouteEncoding("slime", "route_sources:decode_slime", dump="slime_routes"),
        RouteEncoding("prime-rl", "route_sources:decode_prime_rl"),
        RouteEncoding("skyrl", "route_sources:decode_skyrl", dump="skyrl_routes"),
    )
}
"""``--routes-format`` name -> its entry, in the order ``--help`` lists them."""


def unimplemented(obj: Any, protocol: type) -> list[str]:
    """What ``obj`` (an importer instance, a decoder function, a module) lacks of ``protocol``: each attribute
    it declares, each method by its parameters' names (``__call__`` for a callable protocol); empty when
    ``obj`` implements it all."""
    out: list[str] = []
    for base in reversed(protocol.__mro__):
        if base is Protocol or not getattr(base, "_is_protocol", False):
            continue
        out += [f"attribute {name}" for name in vars(base).get("__annotations__", {}) if not hasattr(obj, name)]
        for name, declared in vars(base).items():
            if not inspect.isfunction(declared) or (name.startswith("_") and name != "__call__"):
                continue
            member = obj if name == "__call__" else getattr(obj, name, None)
            if not callable(member):
                out.append(f"method {name}")
            elif _parameters(member) != _parameters(declared)[1:]:
                out.append(f"method {name}{tuple(_parameters(declared)[1:])}")
    return out


def _parameters(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)
