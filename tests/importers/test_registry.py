"""The importers' registry: every entry implements the protocol it declares, and the import dispatches on it.

An entry that declares a protocol its importer does not implement (a record importer with no ``convert``, a
sampler-only stack with no ``sequence_rows``, a decoder with other parameters) fails here, before any dump
reaches it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchscope.importers import _base, registry, route_sources
from mismatchscope.importers.registry import IMPORTERS, ROUTE_ENCODINGS, RouteEncoding, unimplemented

PACKAGE = Path(registry.__file__).parent


@pytest.mark.parametrize("name", list(IMPORTERS))
def test_every_importer_implements_the_protocol_it_declares(name):
    spec = IMPORTERS[name]
    importer = spec.load()()
    assert unimplemented(importer, spec.protocol) == []
    assert type(importer).name == name


@pytest.mark.parametrize("name", list(ROUTE_ENCODINGS))
def test_every_routes_encoding_implements_what_it_declares(name):
    enc = ROUTE_ENCODINGS[name]
    assert unimplemented(enc.decode(), route_sources.RouteDecoder) == []
    reader = enc.dump_reader()
    if reader is not None:
        assert unimplemented(reader, route_sources.DumpRoutes) == []


def test_a_declaration_the_importer_does_not_keep_is_caught():
    skyrl = IMPORTERS["skyrl"].load()()  # reads whole files: no ``convert``, no ``sequence_rows``
    assert unimplemented(skyrl, _base.JsonlImporter) == ["method convert"]
    assert unimplemented(skyrl, _base.SamplerOnlyImporter) == ["attribute sequence_rows"]
    nemo = IMPORTERS["nemo-rl"].load()()
    assert unimplemented(nemo, _base.FileImporter) == ["method read"]

    def decode(rec, model):  # one parameter short
        raise AssertionError

    assert unimplemented(decode, route_sources.RouteDecoder) == ["method __call__('rec', 'model', 'prompt_len')"]
    broken = RouteEncoding("broken", "route_sources:decode_vllm", dump="routes_model")
    reader = broken.dump_reader()
    assert reader is not None and unimplemented(reader, route_sources.DumpRoutes) == [
        "method is_dump",
        "method files",
        "method records",
    ]


def test_the_declared_protocol_is_what_the_import_dispatches_on():
    assert IMPORTERS["nemo-rl"].implements(_base.JsonlImporter)
    assert not IMPORTERS["skyrl"].implements(_base.JsonlImporter)
    assert IMPORTERS["verl"].implements(_base.FileImporter) and IMPORTERS["verl"].implements(_base.SamplerOnlyImporter)
    assert not IMPORTERS["slime"].implements(_base.SamplerOnlyImporter)
    # nothing in the package asks an importer what it happens to have
    source = "\n".join(p.read_text() for p in PACKAGE.glob("*.py"))
    for probe in ("hasattr(importer", "getattr(importer", '"convert")', '"sequence_rows"'):
        assert probe not in source, probe
