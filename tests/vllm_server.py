"""A tiny random-weight Llama and a real vLLM OpenAI-compatible server on 127.0.0.1, for the slow tests.

vLLM lives in its own virtualenv (``RAGCOST_VLLM_VENV``, default ``.vllm-venv`` in the repo, made
by ``scripts/ci_vllm.sh``): it pins torch, transformers and numpy versions that conflict with
ours, so the tests treat it as an external server. Its text is gibberish; the tests check the
protocol, streaming, token accounting, timing and cost.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
SERVED_NAME = "tiny-llama"
# The model's context, and the server's --max-model-len. 1024, not 256: a prompt of ~180 tokens left 256 room
# for ~76 output tokens, which vLLM clipped every max_tokens to, and the kill test needs streams long enough that
# a kill at one's first text is sure to land before the server has written the rest.
CONTEXT = 1024
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
_CORPUS = [
    "Customers can ask for a refund within 30 days of purchase by writing to billing.",
    "Answer the question using only the numbered passages. Cite every passage you use.",
    "Passages: Question: Answer: system user assistant refund billing invoice password",
    "The quick brown fox jumps over the lazy dog 0123456789 [1] [2] [3] ( ) , . ? !",
]


def vllm_venv() -> Path:
    return Path(os.environ.get("RAGCOST_VLLM_VENV", REPO / ".vllm-venv"))


SETUP_RC_ENV = "RAGCOST_VLLM_SETUP_RC"  # scripts/test.sh: the file scripts/ci_vllm.sh's exit code goes to when done
SETUP_WAIT_S = 900.0


def wait_for_setup(timeout_s: float = SETUP_WAIT_S) -> None:
    """When scripts/test.sh is making the vLLM venv in the background (it names the file the install's exit code goes
    to in RAGCOST_VLLM_SETUP_RC), wait for it, bounded; a failed install is an error naming its log."""
    rc_file = os.environ.get(SETUP_RC_ENV)
    if not rc_file:
        return
    rc_path = Path(rc_file)
    deadline = time.monotonic() + timeout_s
    while not rc_path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the vLLM venv install (scripts/ci_vllm.sh) did not finish in {timeout_s:.0f} s; "
                               f"see {rc_path.with_suffix('.log')}")
        time.sleep(1)
    rc = rc_path.read_text().strip()
    if rc != "0":
        log = rc_path.with_suffix(".log")
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else "(no log)"
        raise RuntimeError(f"scripts/ci_vllm.sh exited {rc}; its log {log} ends:\n{tail}")


def vllm_python() -> Optional[Path]:
    wait_for_setup()
    py = vllm_venv() / "bin" / "python"
    return py if py.exists() else None


def build_tiny_model(folder: Path, vocab_size: int = 384, seed: int = 0) -> Path:
    """Random-weight Llama (hidden 128, 4 heads of 32, 2 layers) and a byte-level BPE trained here."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = CONTEXT
    fast.save_pretrained(folder)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=CONTEXT,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(folder, safe_serialization=True)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """``python -m vllm.entrypoints.openai.api_server`` in the vLLM venv; started, waited for, killed."""

    served = SERVED_NAME  # the name clients ask for (--served-model-name)

    def __init__(self, model_dir: Path, log_path: Path, python: Optional[Path] = None, port: Optional[int] = None):
        self.model_dir, self.log_path = model_dir, log_path
        self.python = python or vllm_python()
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.start_seconds: Optional[float] = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
                "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32", "--max-model-len", str(CONTEXT),
                "--enforce-eager", "--served-model-name", SERVED_NAME, "--max-num-seqs", "16",
                "--disable-log-stats"]

    def start(self, timeout_s: float = 600) -> "VllmServer":
        import httpx

        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
        env.update(VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"), HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
        t0 = time.perf_counter()
        log = self.log_path.open("wb")
        # Its own process group, so a kill takes the engine core process with it.
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = t0 + timeout_s
        while time.perf_counter() < deadline:  # bounded wait
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited with {self.proc.returncode} while starting; log:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    self.start_seconds = time.perf_counter() - t0
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.kill()
        raise RuntimeError(f"vLLM server not ready after {timeout_s:.0f}s; log:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL the server and its engine process (the process group this server leads)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill()


def check_loads(model_dir: Path, python: Optional[Path] = None) -> dict:
    """The vLLM venv's transformers can read the config and tokenizer we wrote (a quick subprocess)."""
    code = ("import json,sys; from transformers import AutoConfig, AutoTokenizer; "
            f"c=AutoConfig.from_pretrained({str(model_dir)!r}); t=AutoTokenizer.from_pretrained({str(model_dir)!r}); "
            "print(json.dumps({'hidden': c.hidden_size, 'heads': c.num_attention_heads, 'vocab': len(t)}))")
    out = subprocess.run([str(python or vllm_python()), "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


class NamedServer(VllmServer):
    """The tiny model under its own served name, with stats on so /metrics counts tokens."""

    def __init__(self, served: str, *a, **kw):
        super().__init__(*a, **kw)
        self.served = served

    def command(self) -> list[str]:
        cmd = [c for c in super().command() if c != "--disable-log-stats"]
        cmd[cmd.index("--served-model-name") + 1] = self.served
        return cmd

    def tokens(self) -> tuple[float, float]:
        """(prompt, generated) tokens this server has counted since it started."""
        import re

        import httpx

        text = httpx.get(self.base_url.removesuffix("/v1") + "/metrics", timeout=10).text
        total = lambda name: sum(float(m) for m in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))  # noqa: E731
        return total("vllm:prompt_tokens_total"), total("vllm:generation_tokens_total")


def require_vllm() -> Path:
    """The vLLM venv's python (waiting for scripts/test.sh's background install); skipped without one, failed when
    RAGCOST_REQUIRE_VLLM is set (CI)."""
    import pytest

    py = vllm_python()
    if py is None:
        msg = f"no vLLM venv at {vllm_venv()} (make it with scripts/ci_vllm.sh, or point RAGCOST_VLLM_VENV at one)"
        if os.environ.get("RAGCOST_REQUIRE_VLLM"):
            pytest.fail(msg + "; RAGCOST_REQUIRE_VLLM is set, so this is a failure, not a skip")
        pytest.skip(msg)
    return py


def start_pair(model: Path, logs: Path):
    """Two servers of the tiny model, served as ``small`` and ``large``, started at once (each start is a minute of
    CPU on 2 cores); either failing kills both and raises."""
    import threading
    from types import SimpleNamespace

    srv = {name: NamedServer(name, model, logs / f"{name}.log") for name in ("small", "large")}
    errors: dict[str, BaseException] = {}

    def start(name: str) -> None:
        try:
            srv[name].start()
        except BaseException as e:  # noqa: BLE001 - reported below, after both tries
            errors[name] = e

    threads = [threading.Thread(target=start, args=(n,)) for n in srv]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for s in srv.values():
            s.kill()
        raise RuntimeError(f"vLLM servers did not start: {errors}")
    print(f"\nvLLM servers ready in {srv['small'].start_seconds:.0f}s and {srv['large'].start_seconds:.0f}s")
    return SimpleNamespace(model=model, **srv)
