"""One exception tree for everything a user can cause.

The CLI turns any :class:`MismatchscopeError` into a one-line message on
stderr and exit code 2 (usage and input errors); the traceback is shown only
when ``MISMATCHSCOPE_DEBUG=1``. Each error also derives from the stdlib type
it replaces, so library callers can keep catching ``ValueError`` and friends.
"""

from __future__ import annotations


class MismatchscopeError(Exception):
    """Base of every error a user can cause. ``hint`` says how to fix it."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        base = Exception.__str__(self)  # not KeyError's, which would repr() the message
        return f"{base} ({self.hint})" if self.hint else base


class UsageError(MismatchscopeError, ValueError):
    """A command-line value that cannot be right: unknown rule, bad parameter."""


class InputError(MismatchscopeError, ValueError):
    """A data file that cannot be analysed as given."""


class NoTokensError(InputError):
    """Nothing left to analyse: no rows, or none with finite logprobs (a probe says why in its own words)."""


class MissingColumnsError(InputError, KeyError):
    """Required columns are absent; the hint suggests ``--column``."""


class FileFormatError(InputError):
    """Not Parquet, truncated, or an unknown schema version."""


class CheckpointError(MismatchscopeError, OSError):
    """A checkpoint that is missing, unsafe to load, or inconsistent."""


class TokenizerMismatchError(CheckpointError):
    """Sampler and trainer would not see the same token ids."""


class PromptError(InputError):
    """An empty prompts file, a malformed prompt, or one longer than the context."""


class ImportFormatError(InputError):
    """A record of a training framework's dump that cannot be imported.

    The message starts with ``FILE:LINE:`` (JSONL) or ``FILE (record N):``
    (other files), so the user can open the exact record. ``--skip-bad``
    skips and counts these instead of stopping, unless ``skippable`` is False.
    """

    skippable = True

    def __init__(
        self,
        message: str,
        *,
        file: object = None,
        line: int | None = None,
        record: int | None = None,
        hint: str | None = None,
    ):
        self.file, self.line, self.record = file, line, record
        self.reason = message
        where = "" if file is None else str(file)
        if file is not None and line is not None:
            where += f":{line}"
        elif file is not None and record is not None:
            where += f" (record {record})"
        super().__init__(f"{where}: {message}" if where else message, hint=hint)


class NoTrainerLogprobsError(ImportFormatError):
    """The dump holds no trainer-side recompute (e.g. NeMo-RL's ``force_on_policy_ratio``).

    A property of the whole run, not of one record: ``--skip-bad`` does not skip it.
    """

    skippable = False


class NoSamplerLogprobsError(ImportFormatError):
    """The dump holds no sampler logprobs (the engine was not asked for them): a property of the whole run,
    which ``--skip-bad`` does not skip."""

    skippable = False


class FieldComesAndGoesError(ImportFormatError):
    """A record holds an optional field the import's first record lacks (or the other way round): read on some
    records only, it would be silently ignored (a mask, advantages) or renumbered (sequence ids). A property of
    the file, which ``--skip-bad`` does not skip."""

    skippable = False


class UntrustedPickleError(InputError):
    """A file can only be read by full unpickling, which runs code from the file."""


class SamplerError(MismatchscopeError, RuntimeError):
    """The sampler under test answered, but not with what the probe asked for."""


class SamplerConnectionError(SamplerError, ConnectionError):
    """A sampler server (``--sampler vllm-server``) cannot be reached at its URL."""


class GateConfigError(UsageError):
    """A gate configuration that cannot be used: malformed TOML, an unknown metric or key, a bad limit."""


class IncomparableRunsError(InputError):
    """Baseline and candidate differ in something other than the serving stack (checkpoint, prompts, sampling)."""


class OutputError(MismatchscopeError, OSError):
    """An output path that cannot be written: a directory, unwritable, a full device, or one of the inputs."""


class EngineError(SamplerError):
    """vLLM refused or failed to run the checkpoint: the root cause from its own output, in one line.

    Not a bug of the tool: a kernel without the asked dtype, a model class
    that needs a package the install lacks. The hint names the engine's log
    and ``--sampler hf`` where transformers can sample instead.
    """


class MissingDependencyError(MismatchscopeError, ImportError):
    """An optional package a command needs is not installed."""


class RunLockedError(UsageError):
    """Another process is writing this run directory."""


class ShardIndexError(InputError):
    """A run's shards disagree with its index: a shard lost, changed, foreign, or not a file."""


class DuplicatePositionError(InputError):
    """A (sequence_id, position) pair appears on more than one row."""

    def __init__(self, sequence_id: int, position: int):
        self.sequence_id, self.position = sequence_id, position
        super().__init__(
            f"duplicate (sequence_id, position) rows: sequence {sequence_id} position {position} appears more than once",
            hint="each generated token must appear once; was a file read twice, or do two runs share sequence ids?",
        )


class TurnOrderError(InputError):
    """A multi-turn run's turns out of order: a ``turn`` that decreases within a sequence, or a
    ``turn_position`` that does not restart at 0 where a turn begins."""


class ChatTemplateError(CheckpointError):
    """A checkpoint's chat template cannot render the conversation a multi-turn probe builds."""


class RecorderInputError(InputError):
    """Arrays handed to ``Recorder.add`` / ``Monitor.add`` that cannot be recorded."""


class RecorderError(MismatchscopeError, RuntimeError):
    """The Recorder cannot go on: its writer failed, or it was used after close()."""


class NotAJsonObjectError(InputError):
    """JSON that holds a list, a string, a number or null where an object belongs (:func:`mismatchscope.checks.json_object`).

    Each reader turns it into its own message: ``value_type`` names what the file holds instead.
    """

    def __init__(self, value: object):
        self.value_type = type(value).__name__
        super().__init__(f"a JSON {self.value_type}, not an object")
