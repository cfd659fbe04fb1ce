"""Session fixtures for the probe tests: real checkpoints, real engines, a real server.

Everything here is the real component: the project's tiny Qwen3 and
Qwen3-MoE checkpoints (``sample_data/``), transformers models, in-process
``vllm.LLM`` engines and a vLLM OpenAI server on 127.0.0.1. They are slow
to start on a 2-core machine (an engine about 15-30 s), so each is built once
per session:

* one :class:`HFTrainer` (fp32) per checkpoint;
* one in-process vLLM engine per (checkpoint, dtype, logprobs mode), through
  the ``vllm_sampler`` factory; the tests use three: MoE fp32 raw (always
  started first, see there), dense fp32 processed, dense fp16 processed;
* one vLLM server (dense, fp32, processed logprobs), spawned as soon as the
  session starts if any selected test needs it, so its start-up overlaps the
  tests that don't (under pytest-xdist: when a test first needs it).

``MISMATCHSCOPE_SAMPLE_DATA`` points the tests at another folder built by
``sample_data/build_sample_models.py`` (default: the repository's own).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.probe.refusals import Crafted

# vLLM's engine settings for every test: tests/conftest.py.

# Without the hf extra there is no trainer to test: skip this folder whole,
# cleanly, instead of failing on the test modules' ``import torch``.
try:
    import torch  # noqa: F401
except ImportError:
    collect_ignore_glob = ["test_*.py", "*/test_*.py"]

REPO = Path(__file__).resolve().parents[2]
N_PROMPTS = 8
SERVER_START_TIMEOUT = 300.0


def sample_data_dir() -> Path:
    return Path(os.environ.get("MISMATCHSCOPE_SAMPLE_DATA", REPO / "sample_data"))


def checkpoint_dir(name: str) -> Path:
    path = sample_data_dir() / name
    if not (path / "config.json").is_file():
        shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        pytest.skip(f"{shown} is missing: build it with `python sample_data/build_sample_models.py`")
    return path


def _need_vllm() -> None:
    pytest.importorskip("vllm", reason="needs real vLLM (install the cpu or vllm extra)")


# ------------------------------------------------------------ checkpoints


@pytest.fixture(scope="session")
def dense_dir() -> Path:
    return checkpoint_dir("tiny-qwen3")


@pytest.fixture(scope="session")
def moe_dir() -> Path:
    return checkpoint_dir("tiny-qwen3-moe")


@pytest.fixture(scope="session")
def dense_info(dense_dir):
    from mismatchscope.probe.checkpoint import inspect_checkpoint

    return inspect_checkpoint(dense_dir)


@pytest.fixture(scope="session")
def moe_info(moe_dir):
    from mismatchscope.probe.checkpoint import inspect_checkpoint

    return inspect_checkpoint(moe_dir)


@pytest.fixture(scope="session")
def prompt_texts() -> list[str]:
    path = sample_data_dir() / "prompts.jsonl"
    if not path.is_file():
        pytest.skip("sample_data/prompts.jsonl is missing: build it with `python sample_data/build_sample_models.py`")
    with open(path) as f:
        return [json.loads(line)["prompt"] for line in f if line.strip()][:N_PROMPTS]


@pytest.fixture(scope="session")
def dense_tokenizer(dense_dir):
    from mismatchscope.probe.tokenizer import load_tokenizer

    return load_tokenizer(dense_dir)


def _prompt_ids(info, tokenizer, texts):
    from mismatchscope.probe.tokenizer import check_tokenizer, tokenize_prompts

    check_tokenizer(tokenizer, info, texts)
    return tokenize_prompts(tokenizer, texts, max_model_len=info.max_model_len, max_tokens=16)


@pytest.fixture(scope="session")
def dense_prompt_ids(dense_info, dense_tokenizer, prompt_texts) -> list[list[int]]:
    return _prompt_ids(dense_info, dense_tokenizer, prompt_texts)


@pytest.fixture(scope="session")
def moe_prompt_ids(moe_info, moe_dir, prompt_texts) -> list[list[int]]:
    from mismatchscope.probe.tokenizer import load_tokenizer

    return _prompt_ids(moe_info, load_tokenizer(moe_dir), prompt_texts)


# ------------------------------------------------------------ trainers


@pytest.fixture(scope="session")
def dense_trainer(dense_info):
    from mismatchscope.probe.trainer import HFTrainer
    from mismatchscope.probe.types import TrainerConfig

    return HFTrainer(dense_info, TrainerConfig(dtype="float32", device="cpu"))


@pytest.fixture(scope="session")
def moe_trainer(moe_info):
    from mismatchscope.probe.trainer import HFTrainer
    from mismatchscope.probe.types import TrainerConfig

    return HFTrainer(moe_info, TrainerConfig(dtype="float32", device="cpu"))


# ------------------------------------------------------------ vLLM engines


@pytest.fixture(scope="session")
def vllm_sampler(moe_info):
    """``vllm_sampler(info, dtype, logprobs_mode)``: a started in-process vLLM sampler, one per key.

    In-process engines share vLLM's process-wide parallel state, which the
    *first* engine sets up: a dense model first leaves no expert-parallel
    group, and a later MoE engine then fails ("expert parallel group is not
    initialized"). So the MoE engine (fp32, raw logprobs, the one the tests
    use) is always started first. For the same reason every engine is closed
    only at the end of the session, all together.
    """
    _need_vllm()
    from mismatchscope.probe.samplers import make_sampler
    from mismatchscope.probe.types import SamplerConfig, SamplingConfig

    engines = {}

    def get(info, dtype: str, logprobs_mode: str = "processed_logprobs"):
        if not engines and not info.is_moe:
            get(moe_info, "float32", "raw_logprobs")
        key = (str(info.path), dtype, logprobs_mode)
        if key not in engines:
            engines[key] = make_sampler(
                SamplerConfig(kind="vllm", dtype=dtype),
                info,
                sampling=SamplingConfig(logprobs_mode=logprobs_mode),
            )
        return engines[key]

    yield get
    for sampler in engines.values():
        sampler.close()


# ------------------------------------------------------------ vLLM server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A ``vllm.entrypoints.openai.api_server`` child process on a free loopback port."""

    def __init__(self, model_dir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="vllm-server-", suffix=".log", delete=False)
        env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir),
            "--dtype", "float32",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--enforce-eager",
            "--seed", "0",
            "--logprobs-mode", "processed_logprobs",
            "--max-logprobs", "20",
        ]  # fmt: skip
        # Own process group, so the engine process it spawns is stopped with it.
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_healthy(self, timeout: float = SERVER_START_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the vLLM server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self.url
            except OSError:
                pass
            time.sleep(1.0)
        pytest.fail(f"the vLLM server was not healthy after {timeout:.0f} s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-n:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.log.close()
        os.unlink(self.log.name)


class _LazyServer:
    """The server of this test process: started at session start, or at first use under pytest-xdist."""

    def __init__(self, model_dir: Path):
        self.model_dir = model_dir
        self.server: ServerProcess | None = None

    def start(self) -> ServerProcess:
        if self.server is None:
            self.server = ServerProcess(self.model_dir)
        return self.server


@pytest.fixture(scope="session", autouse=True)
def _server_process(request):
    """Start the server at session start when a selected test needs it (start-up overlaps other tests).

    Under pytest-xdist every worker collects every test, and only one of them runs the server's tests (they
    share the ``vllm-engines`` group): a worker starts its server when a test first asks for it.
    """
    if not any("vllm_server" in item.fixturenames for item in request.session.items):
        yield None
        return
    try:
        import vllm  # noqa: F401
    except ImportError:
        yield None
        return
    model_dir = sample_data_dir() / "tiny-qwen3"
    if not (model_dir / "config.json").is_file():
        yield None
        return
    lazy = _LazyServer(model_dir)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        lazy.start()
    yield lazy
    if lazy.server is not None:
        lazy.server.stop()


@pytest.fixture(scope="session")
def vllm_server(_server_process, dense_dir) -> str:
    """Base URL of a healthy vLLM server on the dense checkpoint (fp32, processed logprobs)."""
    _need_vllm()
    if _server_process is None:
        pytest.skip("no vLLM server was started")
    return _server_process.start().wait_healthy()


@pytest.fixture
def server():
    """(url, set_routes): a real HTTP server on 127.0.0.1 answering what the test crafts."""
    handler = type("Handler", (Crafted,), {"routes": {}, "seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # server_close() waits for the request threads: an answer the client gave up on (a timeout test) is not
    # written, nor its broken pipe reported, while a later test runs the command line in this process
    httpd.daemon_threads = False
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
