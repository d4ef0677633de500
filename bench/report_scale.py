"""`dreads report` at the size the product is for: a run of a million answered questions.

    python bench/report_scale.py                     # 250,000 decisions x 4 questions = 1,000,000
    python bench/report_scale.py -n 20000 --keep     # smaller; keep the database and print its URL

Writes two runs of the same decisions straight into a new PostgreSQL database on ``--pg`` (SQL
``generate_series``: no model, no simulator; writing takes a few minutes): each decision asks two
yes/no questions, a choice of three and a score of three levels, in four cells, with an expected
answer for each. Run ``a`` and run ``b`` answer with scores that separate the classes a little
differently. Then it times, as a user runs them, in a fresh process each:

    dreads report a --json            (every figure, per question and per cell, with intervals)
    dreads report a --against b --json

and prints the wall time and the peak memory (max RSS) of each. Targets on a 2-core machine: the
report in at most 60 s, the comparison in at most 120 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine import ReadSettings  # noqa: E402
from app.engine.settings_hash import settings_hash, settings_to_dict  # noqa: E402
from app.store.db import make_engine, make_sessionmaker  # noqa: E402
from app.store.runs import ensure_run  # noqa: E402
from tests.fixtures.services import create_pg_database, drop_pg_database  # noqa: E402

QUESTIONS = 4
#: ``dreads`` in a fresh interpreter, from this checkout
_DREADS = "from app.cli import main; main()"

#: the payload of every decision, but its state and the expected answers (filled in by SQL)
_PAYLOAD_SQL = """
jsonb_build_object(
  'state', 'Clause ' || g || ': the supplier delivers within ' || (g % 90 + 1) || ' days.',
  'questions', jsonb_build_object(
    'late', jsonb_build_object('type', 'noul', 'instructions', 'Can delivery be late?'),
    'refund', jsonb_build_object('type', 'noul', 'instructions', 'Is a refund owed?'),
    'tier', jsonb_build_object('type', 'choice', 'criteria',
                               jsonb_build_object('gold', null, 'silver', null, 'bronze', null)),
    'risk', jsonb_build_object('type', 'score',
                               'criteria', jsonb_build_array('low', 'mid', 'high'))),
  'expected', jsonb_build_object(
    'late', CASE WHEN g % 13 = 0 THEN 'yes' ELSE 'no' END,
    'refund', CASE WHEN g % 7 = 0 THEN 'yes' ELSE 'no' END,
    'tier', chr(65 + g % 3),
    'risk', ((g % 3) + 1)::text))
"""


def _answers_sql(shift: float) -> str:
    """Answers of every decision of run :run: P(yes) separates the positives by ``shift``
    (a deterministic pseudo-random score per decision and question)."""
    noise = "(abs(hashtext(d.key || q.qid || :salt)) % 10000) / 10000.0"
    p_yes = (f"least(0.999, greatest(0.001, {noise} * 0.7 + "
             f"CASE WHEN q.positive THEN {shift} ELSE 0.0 END))")
    return f"""
    INSERT INTO answers (run_id, decision_id, attempt_id, question_id, question_type, label, option,
                         probs, p_yes, expected_level, confidence, top_prob, stderr, agreement,
                         draws, stop_reason, label_mass, min_label_mass, argmax_is_label, entropy,
                         expected)
    SELECT :run, d.id, NULL, q.qid, q.qtype,
           CASE WHEN q.qtype = 'noul' THEN CASE WHEN {p_yes} > 0.5 THEN 'yes' ELSE 'no' END
                WHEN q.qtype = 'choice' THEN chr(65 + (d.line_no + q.off) % 3)
                ELSE (((d.line_no + q.off) % 3) + 1)::text END,
           'x',
           CASE WHEN q.qtype = 'noul'
                THEN json_build_object('yes', {p_yes}, 'no', 1 - {p_yes})
                WHEN q.qtype = 'choice'
                THEN json_build_object('A', 0.6, 'B', 0.3, 'C', 0.1)
                ELSE json_build_object('1', 0.2, '2', 0.5, '3', 0.3) END,
           CASE WHEN q.qtype = 'noul' THEN {p_yes} END,
           CASE WHEN q.qtype = 'score' THEN 1.1 END,
           0.9, 0.9, 0.02, 1.0, 3, 'agree', 0.97, 0.95, true, 0.3, NULL
    FROM decisions d
    CROSS JOIN LATERAL (VALUES
        ('late', 'noul', d.line_no % 13 = 0, 0),
        ('refund', 'noul', d.line_no % 7 = 0, 0),
        ('tier', 'choice', false, (d.line_no % 5 = 0)::int),
        ('risk', 'score', false, (d.line_no % 4 = 0)::int)) AS q(qid, qtype, positive, off)
    WHERE d.run_id = :run
    """


def _write_run(factory: object, name: str, n: int, shift: float) -> None:
    settings = ReadSettings()
    with factory() as session, session.begin():  # type: ignore[operator]
        run, _ = ensure_run(session, name=name, settings=settings_to_dict(settings),
                            settings_hash=settings_hash(settings), upstream="bench",
                            engine="vllm", source=None, replicates=1, fingerprint=None)
        params = {"run": run.id, "n": n, "salt": name}
        session.execute(text(
            "INSERT INTO decisions (run_id, key, replicate, cell, line_no, n_questions, status,"
            " attempts, finished_at) SELECT :run, 'd' || g, 0, 'c' || (g % 4), g, 4, 'done', 1,"
            " now() FROM generate_series(1, :n) AS g"), params)
        session.execute(text(
            f"INSERT INTO decision_payloads (decision_id, payload) SELECT d.id, ({_PAYLOAD_SQL})"
            "::json FROM decisions d CROSS JOIN LATERAL (SELECT d.line_no AS g) AS s"
            " WHERE d.run_id = :run"), params)
        session.execute(text(
            "INSERT INTO attempts (run_id, decision_id, outcome, n_reads, won, redelivered)"
            " SELECT :run, d.id, 'ok', 3, true, false FROM decisions d WHERE d.run_id = :run"),
            params)
        session.execute(text(_answers_sql(shift)), params)


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of one ``dreads`` command in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _DREADS, *args], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"dreads {' '.join(args)} failed: {err.strip()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=250_000,
                        help="decisions per run (4 questions each)")
    parser.add_argument("--pg", default=os.environ.get("DREADS_BENCH_PG",
                                                       "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--keep", action="store_true", help="keep the database; print its URL")
    args = parser.parse_args()
    url = create_pg_database(args.pg, "report_scale")
    try:
        engine = make_engine(url)
        factory = make_sessionmaker(engine)
        start = time.perf_counter()
        _write_run(factory, "a", args.n, 0.45)
        _write_run(factory, "b", args.n, 0.40)
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))
        engine.dispose()
        print(f"wrote 2 runs of {args.n:,} decisions, {args.n * QUESTIONS:,} answered questions "
              f"each, in {time.perf_counter() - start:.1f} s")
        env = {**os.environ, "DREADS_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
        for label, cmd in (("report", ["report", "a", "--json"]),
                           ("report --against", ["report", "a", "--against", "b", "--json"])):
            seconds, peak = _timed(cmd, env)
            print(f"dreads {label:<17} {seconds:7.1f} s   peak RSS {peak:,.0f} MiB")
    finally:
        if args.keep:
            print(f"kept: DREADS_DATABASE_URL={url}")
        else:
            drop_pg_database(url)


if __name__ == "__main__":
    main()
