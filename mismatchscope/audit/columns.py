"""The columns of a per-token audit: each selected rule's decision on every token, and what it decided on.

``compare-masks --write DIR`` writes two files (docs/format.md, "Per-token
audit"). ``tokens.parquet`` has a row per token the pass counted, keyed as the
run is (``sequence_id``, ``position``, and ``turn``, ``turn_position`` where
the run has them), a decision column per token rule (``keep``, ``reject`` or
``reweight``; a rule that reads the advantage on a run without one gets a
column per hypothesis, ``dppo-tv [A>0]`` and ``dppo-tv [A<0]``), the weight a
reweighting rule applies, and each statistic a rule thresholds (``ratio``,
``p_minus_q``, ``binary_kl_max``, ...), one column however many rules read
it; a statistic that is another's absolute value to the bit (``abs_p_minus_q``
beside ``p_minus_q``) is not stored twice, the metadata says which. ``sequences.parquet`` has a row per sequence with the same for the
sequence rules, which decide once a sequence's last token is read: writing
their decision on every token would take a second pass over the run.

The decisions are the actions the pass counted (``MaskAccumulator.add`` hands
them on), never computed again, so the audit's counts are the table's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property, partial
from typing import Any

import numpy as np
import pyarrow as pa

from .._version import __version__
from ..analysis.batch import BatchTokens
from ..analysis.evaluate import sequence_actions
from ..analysis.masks import Unit
from ..analysis.results import display_name
from ..arrow import from_numpy, strings
from ..divergence import TokenTerms
from ..documents import json_edge, to_json
from ..rules import REWEIGHT, RuleInstance, SequenceInputs
from ..rules.base import Statistic
from .kl import compiled_statistic

AUDIT_SCHEMA_VERSION = 2
"""raised when a column is renamed, removed or retyped (docs/format.md); 2: ``abs_p_minus_q`` is read from
``p_minus_q`` where the file has that column."""
METADATA_KEY = b"mismatchscope_audit"
TOKENS_FILE = "tokens.parquet"
SEQUENCES_FILE = "sequences.parquet"
DECISIONS = ("keep", "reject", "reweight")
"""the decision column's values, in the order of the rules' action codes (KEEP, REJECT, REWEIGHT)."""
CARRIED = ("turn", "turn_position")
"""the run's own keys besides (sequence_id, position), carried where the run has them."""
WEIGHT_SUFFIX = ".weight"

SLICE_ROWS = 32768
"""tokens per slice the statistics are evaluated on. The binary KLs are a dozen numpy steps, each a float64
temporary: a slice's stay in a core's cache. Inside the command (its allocator keeps freed blocks for reuse, so
a temporary costs no page faults) 8,192 to 131,072 rows took the same CPU; fewer slices hand the GIL back and
forth less often, and at 10 million tokens 32,768 gave the command its shortest wall time (1.48x the command
without ``--write``, 1.55x at 8,192, 1.52x on whole batches, same run)."""

_DECISION_TYPE = pa.dictionary(pa.int8(), pa.string())
_DECISION_VALUES = strings(DECISIONS)


@dataclass(frozen=True)
class AuditRule:
    """One rule under one advantage hypothesis, as the audit names its columns."""

    column: str
    """the decision column: the rule's name as the tables print it (its label where two share a name)."""
    unit: Unit
    statistics: tuple[str, ...]
    """the statistic columns the rule thresholds."""
    weight: str | None
    """the weight column of a reweighting rule; None for a rejecting one."""

    def describe(self) -> AuditRuleEntry:
        rule = self.unit.rule
        return AuditRuleEntry(
            column=self.column,
            name=rule.name,
            label=rule.label,
            params=rule.params,
            hypothesis=self.unit.hypothesis,
            level=rule.level,
            action=rule.spec.acts,
            statistics=list(self.statistics),
            weight=self.weight,
        )


@dataclass(frozen=True)
class AuditRuleEntry:
    """One rule as the audit's metadata describes it (``rules`` in docs/format.md), in the order written."""

    column: str
    name: str
    label: str
    params: dict[str, Any]
    hypothesis: str
    level: str
    action: str
    statistics: list[str]
    weight: str | None


StatisticOf = tuple[Statistic, Any]
"""a statistic and the config of the first rule that asked for it (the config fields it reads are equal)."""


@dataclass(frozen=True)
class AuditLayout:
    """Which columns an audit has and how each is computed, decided once from the pass's rule units."""

    token_rules: tuple[AuditRule, ...]
    sequence_rules: tuple[AuditRule, ...]
    token_statistics: dict[str, StatisticOf]
    sequence_statistics: dict[str, StatisticOf]
    carried: tuple[str, ...]
    """of :data:`CARRIED`, the columns the run has."""
    source: str
    """the run, as given."""
    absolute: dict[str, StatisticOf]
    """token statistics stored as another column's absolute value (``Statistic.absolute_of``), by name: the
    statistic and the column that holds its signed value."""

    @classmethod
    def of(cls, units: tuple[Unit, ...] | list[Unit], carried: tuple[str, ...], source: str) -> AuditLayout:
        """The layout for a pass's units (those of a ``--sweep`` are left out: the audit is of the rules chosen)."""
        chosen = [u for u in units if u.sweep is None]
        names = _decision_columns(chosen)
        token_stats: dict[str, StatisticOf] = {}
        seq_stats: dict[str, StatisticOf] = {}
        token_rules, seq_rules = [], []
        for u, column in zip(chosen, names, strict=True):
            stats = token_stats if u.rule.level == "token" else seq_stats
            cols = []
            for st in u.rule.spec.statistics:
                name = st.column(u.rule.config)
                stats.setdefault(name, (st, u.rule.config))
                cols.append(name)
            weight = column + WEIGHT_SUFFIX if u.rule.spec.weight is not None else None
            entry = AuditRule(column, u, tuple(cols), weight)
            (token_rules if u.rule.level == "token" else seq_rules).append(entry)
        absolute = {
            name: (st, signed) for name, (st, c) in token_stats.items() if (signed := _signed(st, c, token_stats))
        }
        token_stats = {name: v for name, v in token_stats.items() if name not in absolute}
        return cls(tuple(token_rules), tuple(seq_rules), token_stats, seq_stats, carried, source, absolute)

    # ---------------------------------------------------------------- tokens.parquet

    @cached_property
    def token_schema(self) -> pa.Schema:
        fields = [_required("sequence_id", pa.int64()), _required("position", pa.int32())]
        fields += [_required(c, pa.int32()) for c in self.carried]
        for r in self.token_rules:
            fields.append(_required(r.column, _DECISION_TYPE))
            if r.weight is not None:
                fields.append(pa.field(r.weight, pa.float64()))
        fields += [_required(name, pa.float64()) for name in self.token_statistics]
        return pa.schema(fields, metadata={METADATA_KEY: _json(self.describe("tokens"))})

    def token_batch(self, tokens: BatchTokens) -> pa.RecordBatch:
        """One batch's rows of ``tokens.parquet`` (a pure function of the batch: run on the worker thread)."""
        b, t = tokens.batch, tokens.terms
        arrays: list[pa.Array] = [
            from_numpy(b["sequence_id"], pa.int64()),
            from_numpy(b["position"], pa.int32()),
        ]
        arrays += [from_numpy(b[c], pa.int32()) for c in self.carried]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for r in self.token_rules:
                action = tokens.actions[r.unit.key]
                arrays.append(_decisions(action))
                if r.weight is not None:
                    arrays.append(_token_weights(r.unit.rule, t, action))
            arrays += [from_numpy(v, pa.float64()) for v in self._token_statistics(t)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.token_schema)

    def _token_statistics(self, t: TokenTerms) -> list[np.ndarray]:
        """Each token statistic of the batch, evaluated a slice of :data:`SLICE_ROWS` tokens at a time.

        A statistic is a chain of elementwise numpy steps (the binary KLs a
        dozen), each writing a temporary the size of its input: on a whole
        batch those temporaries leave the cache and every step streams through
        memory, on a slice they stay in it. The steps, so the values, are the
        same to the bit. A statistic that is one of the terms the pass already
        holds (``ratio``) is taken whole, without a copy.
        """
        n = t.log_ratio_T.size
        head = _sliced(t, slice(0, SLICE_ROWS))
        values: dict[str, np.ndarray] = {}
        sliced = []
        for name, (st, config) in self.token_statistics.items():
            fn = compiled_statistic(st, config) or partial(st.fn, config)
            first = fn(head)
            if any(first is term for term in vars(head).values()):
                values[name] = fn(t)
            else:
                values[name] = np.empty(n, np.float64)
                values[name][:SLICE_ROWS] = first
                sliced.append((values[name], fn))
        for lo in range(SLICE_ROWS, n, SLICE_ROWS):
            part = _sliced(t, slice(lo, lo + SLICE_ROWS))
            for out, fn in sliced:
                out[lo : lo + SLICE_ROWS] = fn(part)
        return list(values.values())

    # ---------------------------------------------------------------- sequences.parquet

    def sequence_table(self, sequence_id_S: np.ndarray, seq: SequenceInputs, tokens: int) -> pa.Table:
        """``sequences.parquet``: a row per sequence, with every sequence rule's decision, weight and statistics."""
        cols: dict[str, pa.Array] = {
            "sequence_id": from_numpy(sequence_id_S, pa.int64()),
            "tokens": from_numpy(seq.n_tokens_S, pa.int64()),
        }
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for r in self.sequence_rules:
                action = sequence_actions(r.unit, seq)
                cols[r.column] = _decisions(action)
                if r.weight is not None:
                    cols[r.weight] = _weights(r.unit.rule, seq, action)
            for name, (st, config) in self.sequence_statistics.items():
                cols[name] = from_numpy(st.fn(config, seq), pa.float64())
        meta = self.describe("sequences") | {"tokens": tokens, "sequences": int(sequence_id_S.size)}
        weights = {r.weight for r in self.sequence_rules}
        schema = pa.schema(
            [pa.field(n, a.type, nullable=n in weights) for n, a in cols.items()], metadata={METADATA_KEY: _json(meta)}
        )
        return pa.Table.from_arrays(list(cols.values()), schema=schema)

    # ---------------------------------------------------------------- what the files say about themselves

    @json_edge
    def describe(self, file: str) -> dict[str, Any]:
        """The file's metadata: schema version, the run, each rule's columns, each statistic's meaning."""
        token = file == "tokens"
        rules = self.token_rules if token else self.sequence_rules
        stats = self.token_statistics if token else self.sequence_statistics
        return {
            "audit_schema_version": AUDIT_SCHEMA_VERSION,
            "mismatchscope_version": __version__,
            "file": TOKENS_FILE if token else SEQUENCES_FILE,
            "source": self.source,
            "decisions": list(DECISIONS),
            "rules": [to_json(r.describe()) for r in rules],
            "statistics": {name: st.doc for name, (st, _) in stats.items()},
            "absolute_of": {name: {"column": signed, "doc": st.doc} for name, (st, signed) in self.absolute.items()}
            if token
            else {},
        }


def _required(name: str, type: pa.DataType) -> pa.Field:
    """A column that has a value on every row: written without definition levels, which would cost the writer
    as much again as the values of a decision column."""
    return pa.field(name, type, nullable=False)


def _signed(st: Statistic, config: Any, stats: dict[str, StatisticOf]) -> str | None:
    """The column that holds ``st``'s signed value where the layout has it (``st`` is its absolute value)."""
    if st.absolute_of is None:
        return None
    signed = st.absolute_of.column(config)
    return signed if signed in stats else None


def _decision_columns(units: list[Unit]) -> list[str]:
    """Each unit's column: its name as the tables print it, or its label where two units share a name."""
    names = [display_name(u.rule.name, u.hypothesis) for u in units]
    return [
        display_name(u.rule.label, u.hypothesis) if names.count(n) > 1 else n for u, n in zip(units, names, strict=True)
    ]


def _sliced(t: TokenTerms, rows: slice | np.ndarray) -> TokenTerms:
    """``t``'s rows ``rows``: views of its arrays for a slice, copies for an index array."""
    terms = {f.name: getattr(t, f.name) for f in fields(TokenTerms)}
    return replace(t, **{name: v[rows] for name, v in terms.items() if v is not None})


def _decisions(action: np.ndarray) -> pa.DictionaryArray:
    """The rules' action codes as a dictionary column whose values read ``keep``, ``reject``, ``reweight``."""
    return pa.DictionaryArray.from_arrays(from_numpy(action, pa.int8()), _DECISION_VALUES, safe=False)  # codes 0-2


def _weights(rule: RuleInstance, x: Any, action: np.ndarray) -> pa.Array:
    """The weight a reweighting rule puts in place of the ratio where it reweights; null where it leaves the
    ratio as it is (there the weight is the ``ratio`` column itself)."""
    assert rule.spec.weight is not None  # only reweighting rules have a weight column
    return from_numpy(rule.spec.weight(rule.config, x), pa.float64(), valid=action == REWEIGHT)


def _token_weights(rule: RuleInstance, t: TokenTerms, action: np.ndarray) -> pa.Array:
    """:func:`_weights` of a batch's tokens, the weight evaluated on the tokens the rule reweights alone (a few in
    a batch; a weight is elementwise, so each is the value it has on the whole batch)."""
    assert rule.spec.weight is not None  # only reweighting rules have a weight column
    acted = action == REWEIGHT
    rows = np.flatnonzero(acted)
    values = np.zeros(acted.size, np.float64)
    if rows.size:
        values[rows] = rule.spec.weight(rule.config, _sliced(t, rows))
    return from_numpy(values, pa.float64(), valid=acted)


def _json(payload: dict[str, Any]) -> bytes:
    import json

    return json.dumps(payload, sort_keys=False, default=str).encode()
