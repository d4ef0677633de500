"""``dreads submit`` of a line whose state no model could read: refused from its length as one
bad line (the rest stored), in bounded memory (peak RSS of the submit process), never
tokenized."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from tests.fixtures.services import ROOT, RedisServer, free_port

QUESTIONS = {"spam": {"type": "noul", "instructions": "Is this text spam?"}}
#: Runs ``dreads`` as a child and prints its peak RSS (KiB) last, on stderr.
_MEASURED = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
             "sys.exit(done.returncode)")


def _dreads(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _MEASURED, sys.executable, "-c",
                           "from app.cli import main; main()", *args],
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_5_mb_line_is_one_bad_line_in_bounded_memory(tmp_path: Path,
                                                       cli_redis: RedisServer) -> None:
    job = tmp_path / "job.jsonl"
    job.write_bytes(b"\n".join([
        orjson.dumps({"id": "small-1", "state": "Win a prize", "questions": QUESTIONS}),
        orjson.dumps({"id": "huge", "state": "spam " * 1_000_000, "questions": QUESTIONS}),
        orjson.dumps({"id": "small-2", "state": "Dinner at 8?", "questions": QUESTIONS}),
    ]) + b"\n")
    db = f"sqlite:///{tmp_path / 'hostile.db'}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DREADS_")},
           "PYTHONPATH": str(ROOT), "DREADS_MODEL": "dgemma", "DREADS_TOKENIZER": "standin",
           "DREADS_BROKER_URL": cli_redis.url}
    assert _dreads("db", "upgrade", "--database-url", db, env=env).returncode == 0
    done = _dreads("submit", str(job), "--run", "hostile", "--database-url", db, "--json",
                   "--upstream", f"http://127.0.0.1:{free_port()}", env=env)
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert (report["valid"], report["inserted"]) == (2, 2)
    [bad] = report["bad_lines"]
    assert (bad["line"], bad["id"]) == (2, "huge")
    assert bad["reason"].startswith("its state is 5,000,000 characters and its longest "
                                    "instructions 18, more than the model can read")
    peak_mib = int(done.stderr.strip().splitlines()[-1]) / 1024
    assert peak_mib < 400  # tokenizing it took 846 MiB and 37 s
